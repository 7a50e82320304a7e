/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Command kubectl-lockedjob is the kubectl plugin of lockedjob (`kubectl lockedjob ...`): it shows
// locks, explains why a LockedJob waits, waits for one to finish and creates one from the command
// line. It reads only the Kubernetes API; the commands live in internal/plugin.
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	// Auth providers (OIDC, exec plugins configured in a kubeconfig), as kubectl has them.
	_ "k8s.io/client-go/plugin/pkg/client/auth"

	"github.com/lockedjob/lockedjob/internal/plugin"
)

func main() {
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	os.Exit(plugin.Run(streams, os.Args[1:]))
}
