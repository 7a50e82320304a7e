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

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// NameLabelValue is the value of the LabelLockedJob and LabelLockedCronJob labels for an object
// called name: the name itself if it is a valid label value (at most 63 characters), else a prefix
// and NameHash of the whole name. A Job's AnnotationLockedJob keeps the full name.
func NameLabelValue(name string) string {
	if len(validation.IsValidLabelValue(name)) == 0 {
		return name
	}
	tag := NameHash(name)
	prefix := name[:min(len(name), validation.LabelValueMaxLength-len(tag)-1)]
	// A label value must end in an alphanumeric character.
	prefix = strings.TrimRight(prefix, "-._")
	return prefix + "-" + tag
}

// NameHash tells apart names the operator cut to the same prefix (a label value, a Job's name): 8
// hex digits of SHA-256 of the whole name.
func NameHash(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:4])
}
