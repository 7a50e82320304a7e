package redisserver

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ScriptRun is one script Redis ran, as MONITOR shows it: the script's name, its keys and its
// arguments, each as MONITOR quoted it, and the commands the script called, in order (MONITOR
// prints them after the script's own line, since Redis runs nothing else in between).
type ScriptRun struct {
	Name       string
	Keys, Argv []string
	Calls      [][]string
}

// Called reports whether the script called command (case-insensitive) with key as its first argument.
func (r ScriptRun) Called(command, key string) bool {
	for _, c := range r.Calls {
		if len(c) > 1 && strings.EqualFold(c[0], command) && c[1] == key {
			return true
		}
	}
	return false
}

var (
	monitorArg = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)
	monitorLua = regexp.MustCompile(`^\S+ \[\d+ lua\] `)
)

// ScriptNames maps the SHA-1 of each source (EVALSHA names a script by it) to its name.
func ScriptNames(sources map[string]string) map[string]string {
	names := make(map[string]string, len(sources))
	for name, src := range sources {
		names[redis.NewScript(src).Hash()] = name
	}
	return names
}

// ScriptsRun are the scripts the MONITOR lines show Redis running (EVALSHA), in order, named by
// names (ScriptNames; "" for a script not in it), each with the commands it called. Other commands
// are left out. Every script must be loaded before the recording starts: an EVALSHA
// that Redis refused with NOSCRIPT (the caller then loads the script and sends it again) looks
// here like one that ran.
func ScriptsRun(lines []string, names map[string]string) ([]ScriptRun, error) {
	var runs []ScriptRun
	inScript := false // the lines since the last EVALSHA are its script's calls
	for _, line := range lines {
		args := monitorArg.FindAllStringSubmatch(line, -1)
		if monitorLua.MatchString(line) {
			if inScript && len(args) > 0 {
				call := make([]string, len(args))
				for i, a := range args {
					call[i] = a[1]
				}
				runs[len(runs)-1].Calls = append(runs[len(runs)-1].Calls, call)
			}
			continue
		}
		inScript = false
		if len(args) < 3 || !strings.EqualFold(args[0][1], "EVALSHA") {
			continue
		}
		var numKeys int
		if _, err := fmt.Sscan(args[2][1], &numKeys); err != nil || 3+numKeys > len(args) {
			return nil, fmt.Errorf("MONITOR line %q: %d keys of %d arguments: %v", line, numKeys, len(args)-3, err)
		}
		run := ScriptRun{Name: names[args[1][1]]}
		for _, a := range args[3 : 3+numKeys] {
			run.Keys = append(run.Keys, a[1])
		}
		for _, a := range args[3+numKeys:] {
			run.Argv = append(run.Argv, a[1])
		}
		runs = append(runs, run)
		inScript = true
	}
	return runs, nil
}
