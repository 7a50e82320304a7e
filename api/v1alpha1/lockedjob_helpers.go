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

package v1alpha1

// Readers of a LockedJob that fill in what an object stored before the CRD's defaults leaves
// unset, so every reader of the operator and the plugin gets the same answer.

// ScopeOrDefault is spec.lock.scope, Namespace when unset (objects stored before the CRD default).
func (s *LockSpec) ScopeOrDefault() LockScope {
	if s.Scope == "" {
		return LockScopeNamespace
	}
	return s.Scope
}

// OnLockLostOrDefault is spec.lock.onLockLost, DefaultLockLostPolicy when unset.
func (s *LockSpec) OnLockLostOrDefault() LockLostPolicy {
	if s.OnLockLost == "" {
		return DefaultLockLostPolicy
	}
	return s.OnLockLost
}

// IsTerminal reports whether p is an end: Succeeded, Failed or LockLost. A LockedJob in a terminal
// phase holds no lock and runs no Job again.
func (p LockedJobPhase) IsTerminal() bool {
	return p == PhaseSucceeded || p == PhaseFailed || p == PhaseLockLost
}
