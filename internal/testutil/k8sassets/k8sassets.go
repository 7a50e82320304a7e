// Package k8sassets locates the Kubernetes control-plane binaries (etcd,
// kube-apiserver, kubectl, ...) that hack/k8s-bin.sh builds, for use as
// KUBEBUILDER_ASSETS by controller-runtime's envtest.
package k8sassets

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// K8sVersion is the Kubernetes version hack/k8s-bin.sh builds; it names the
// cache folder. Keep in sync with hack/lib/k8s-common.sh.
const K8sVersion = "v1.37.2"

// Required lists the binaries envtest needs in the assets folder.
var Required = []string{"kube-apiserver", "etcd", "kubectl"}

// Dir returns the folder to use as KUBEBUILDER_ASSETS: $KUBEBUILDER_ASSETS if
// it is set and holds the binaries, else the default hack/k8s-bin.sh cache
// folder if that holds them, else an error saying how to build them.
func Dir() (string, error) {
	var tried []string
	if env := os.Getenv("KUBEBUILDER_ASSETS"); env != "" {
		missing := missingIn(env)
		if len(missing) == 0 {
			return env, nil
		}
		tried = append(tried, fmt.Sprintf("KUBEBUILDER_ASSETS=%s lacks %v", env, missing))
	}
	def, err := DefaultDir()
	if err != nil {
		return "", err
	}
	missing := missingIn(def)
	if len(missing) == 0 {
		return def, nil
	}
	tried = append(tried, fmt.Sprintf("%s lacks %v", def, missing))
	return "", fmt.Errorf("kubernetes test binaries not found (%s): run `make k8s-bin` "+
		"(or hack/k8s-bin.sh) in the repository root to build them (first build takes ~10 min)",
		strings.Join(tried, "; "))
}

// DefaultDir is the folder hack/k8s-bin.sh builds into:
// $K8S_BIN_DIR, else ${LOCKEDJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lockedjob}/k8s-<version>.
func DefaultDir() (string, error) {
	if d := os.Getenv("K8S_BIN_DIR"); d != "" {
		return d, nil
	}
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "k8s-"+K8sVersion), nil
}

// cacheDir is ${LOCKEDJOB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lockedjob}, as hack/lib/k8s-common.sh.
func cacheDir() (string, error) {
	cache := os.Getenv("LOCKEDJOB_CACHE")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", errors.New("cannot find the k8s binaries cache: neither LOCKEDJOB_CACHE, XDG_CACHE_HOME nor HOME is set")
			}
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "lockedjob")
	}
	return cache, nil
}

// KueueVersion is the Kueue version hack/kueue-bin.sh builds; it names the
// cache folder. Keep in sync with hack/lib/k8s-common.sh and hack/kueue/go.mod.
const KueueVersion = "v0.17.0"

// Kueue returns the path of the Kueue manager binary hack/kueue-bin.sh builds:
// $KUEUE_BIN_DIR/kueue, else ${LOCKEDJOB_CACHE:-...}/kueue-<version>/kueue, or an
// error saying how to build it.
func Kueue() (string, error) {
	dir := os.Getenv("KUEUE_BIN_DIR")
	if dir == "" {
		cache, err := cacheDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(cache, "kueue-"+KueueVersion)
	}
	bin := filepath.Join(dir, "kueue")
	fi, err := os.Stat(bin)
	if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("kueue %s not found at %s: run `make kueue-bin` (or hack/kueue-bin.sh) "+
			"in the repository root to build it (first build takes ~4 min)", KueueVersion, bin)
	}
	return bin, nil
}

func missingIn(dir string) []string {
	var missing []string
	for _, name := range Required {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			missing = append(missing, name)
		}
	}
	return missing
}
