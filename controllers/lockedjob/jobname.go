package lockedjob

import (
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

// The Job's name, derived from its LockedJob.

// jobName derives the Job's name from the LockedJob and the fencing token, so that a second create
// for the same acquisition (a restarted or paused operator) fails with AlreadyExists instead of
// starting a second Job, while a new acquisition gets a new name.
//
// The name is a DNS-1123 label, not just a subdomain: the Job API copies it into the pods' labels
// and, for Indexed Jobs, their host names, and would refuse it only after the lock is acquired. When
// the LockedJob's name does not fit (dots, or too long), a hash of the whole name keeps two
// LockedJobs that share a prefix apart.
func jobName(lj *batchv1alpha1.LockedJob, fence int64) string {
	suffix := "-" + strconv.FormatInt(fence, 36)
	if name := lj.Name + suffix; len(validation.IsDNS1123Label(name)) == 0 {
		return name
	}
	tag := batchv1alpha1.NameHash(lj.Name)
	prefix := dnsLabelPrefix(lj.Name, validation.DNS1123LabelMaxLength-len(suffix)-len(tag)-1)
	if prefix == "" {
		return tag + suffix
	}
	return prefix + "-" + tag + suffix
}

// dnsLabelPrefix is at most max characters of name made fit for a DNS-1123 label: lower case, '-'
// for anything but letters and digits, and no '-' at either end.
func dnsLabelPrefix(name string, max int) string {
	b := []byte(strings.ToLower(name))
	for i, c := range b {
		if !dnsLabelChar(c) {
			b[i] = '-'
		}
	}
	return strings.Trim(string(b[:min(len(b), max)]), "-")
}

// dnsLabelChar reports whether c may stay in a DNS-1123 label once lower-cased: the label takes
// '-' too, but dnsLabelPrefix writes that itself.
func dnsLabelChar(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
}
