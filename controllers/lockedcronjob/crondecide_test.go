package lockedcronjob

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	clocktesting "k8s.io/utils/clock/testing"

	batchv1alpha1 "github.com/lockedjob/lockedjob/api/v1alpha1"
)

func mustParse(t *testing.T, spec string) cron.Schedule {
	t.Helper()
	s, err := cron.ParseStandard(spec)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func at(hhmm string) time.Time {
	t, err := time.Parse(time.RFC3339, "2026-12-01T"+hhmm+":00Z")
	if err != nil {
		panic(err)
	}
	return t
}

// TestDecideCron walks the LockedCronJob's decision through the cases that matter, on a fake clock
// at 10:07:30 with a schedule every five minutes: 10:05 is the most recent scheduled time, 10:10 the next.
func TestDecideCron(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(at("10:07").Add(30 * time.Second))
	every5 := mustParse(t, "*/5 * * * *")
	held, free := true, false
	// base: created at 09:58, nothing run yet, onBusy Queue, its lock scope allowed.
	base := cronObservation{now: clk.Now(), schedule: every5, loc: time.UTC, since: at("09:58"),
		scopeAllowed: true, onBusy: batchv1alpha1.OnBusyQueue, successLimit: 3, failedLimit: 1}
	with := func(mutate func(*cronObservation)) cronObservation {
		o := base
		mutate(&o)
		return o
	}
	waiting := cronChild{name: "c-1", uid: "u1", scheduled: at("10:00")}
	finished := cronChild{name: "c-0", uid: "u0", scheduled: at("09:55"), finished: true, succeeded: true}
	thisRun := cronChild{name: "c-2", uid: "u2", scheduled: at("10:05")}
	deadline := func(d time.Duration) *time.Duration { return &d }

	cases := []struct {
		name     string
		obs      cronObservation
		wantStep cronStep
		wantRun  time.Time
		wantNext time.Time
		wantGone []string // replace
	}{
		{"nothing scheduled since creation: idle until the next time", with(func(o *cronObservation) { o.since = at("10:06") }), cronIdle, time.Time{}, at("10:10"), nil},
		{"two runs missed: only the most recent is due", base, cronCreate, at("10:05"), at("10:10"), nil},
		{"a week missed: still one run, the most recent", with(func(o *cronObservation) { o.since = at("10:05").AddDate(0, 0, -7) }), cronCreate, at("10:05"), at("10:10"), nil},
		{"exactly at the scheduled time: due", with(func(o *cronObservation) { o.now = at("10:05") }), cronCreate, at("10:05"), at("10:10"), nil},
		{"missed by more than startingDeadlineSeconds: not made up", with(func(o *cronObservation) { o.deadline = deadline(time.Minute) }), cronIdle, time.Time{}, at("10:10"), nil},
		{"missed, within startingDeadlineSeconds: due", with(func(o *cronObservation) { o.deadline = deadline(3 * time.Minute) }), cronCreate, at("10:05"), at("10:10"), nil},
		{"run already created, status behind: record it, create nothing", with(func(o *cronObservation) { o.children = []cronChild{thisRun} }), cronRecordRun, at("10:05"), at("10:10"), nil},
		{"run already dealt with: idle", with(func(o *cronObservation) { o.since = at("10:05") }), cronIdle, time.Time{}, at("10:10"), nil},
		{"suspended: nothing, no next time", with(func(o *cronObservation) { o.suspended = true }), cronIdle, time.Time{}, time.Time{}, nil},
		{"invalid schedule: wait for the user", with(func(o *cronObservation) { o.schedule, o.invalid = nil, true }), cronInvalid, time.Time{}, time.Time{}, nil},
		{"scope not allowed, Queue: create nothing, no next time", with(func(o *cronObservation) { o.scopeAllowed = false }), cronScopeNotAllowed, time.Time{}, time.Time{}, nil},
		{"scope not allowed, Skip: never ask Redis about another tenant's lock", with(func(o *cronObservation) {
			o.onBusy, o.scopeAllowed = batchv1alpha1.OnBusySkip, false
		}), cronScopeNotAllowed, time.Time{}, time.Time{}, nil},
		{"scope not allowed, Skip, the lock read held: no skip decided on it", with(func(o *cronObservation) {
			o.onBusy, o.scopeAllowed, o.lockHeld = batchv1alpha1.OnBusySkip, false, &held
		}), cronScopeNotAllowed, time.Time{}, time.Time{}, nil},
		{"scope not allowed, Replace: delete nothing", with(func(o *cronObservation) {
			o.onBusy, o.scopeAllowed, o.children = batchv1alpha1.OnBusyReplace, false, []cronChild{waiting}
		}), cronScopeNotAllowed, time.Time{}, time.Time{}, nil},

		{"Queue, own run unfinished: create anyway (it waits in line)", with(func(o *cronObservation) { o.children = []cronChild{waiting} }), cronCreate, at("10:05"), at("10:10"), nil},

		{"Skip, lock not asked yet: ask Redis", with(func(o *cronObservation) { o.onBusy = batchv1alpha1.OnBusySkip }), cronInspectLock, at("10:05"), at("10:10"), nil},
		{"Skip, lock held by anyone: skip", with(func(o *cronObservation) { o.onBusy, o.lockHeld = batchv1alpha1.OnBusySkip, &held }), cronSkip, at("10:05"), at("10:10"), nil},
		{"Skip, lock free: create", with(func(o *cronObservation) { o.onBusy, o.lockHeld = batchv1alpha1.OnBusySkip, &free }), cronCreate, at("10:05"), at("10:10"), nil},
		{"Skip, own earlier run unfinished: skip without asking Redis", with(func(o *cronObservation) {
			o.onBusy, o.children = batchv1alpha1.OnBusySkip, []cronChild{waiting}
		}), cronSkip, at("10:05"), at("10:10"), nil},
		{"Skip, own earlier run finished, lock free: create", with(func(o *cronObservation) {
			o.onBusy, o.children, o.lockHeld = batchv1alpha1.OnBusySkip, []cronChild{finished}, &free
		}), cronCreate, at("10:05"), at("10:10"), nil},
		{"Skip, the due run's own LockedJob exists: record, never skip against itself", with(func(o *cronObservation) {
			o.onBusy, o.children, o.lockHeld = batchv1alpha1.OnBusySkip, []cronChild{thisRun}, &held
		}), cronRecordRun, at("10:05"), at("10:10"), nil},

		{"Replace, nothing unfinished: create", with(func(o *cronObservation) {
			o.onBusy, o.children = batchv1alpha1.OnBusyReplace, []cronChild{finished}
		}), cronCreate, at("10:05"), at("10:10"), nil},
		{"Replace, own runs unfinished: delete them, not the finished, not those already going", with(func(o *cronObservation) {
			going := cronChild{name: "c-g", uid: "ug", scheduled: at("09:50"), deleting: true}
			o.onBusy, o.children = batchv1alpha1.OnBusyReplace, []cronChild{going, finished, waiting}
		}), cronReplace, at("10:05"), at("10:10"), []string{"c-1"}},
		{"Replace, the only unfinished ones are going: create", with(func(o *cronObservation) {
			going := waiting
			going.deleting = true
			o.onBusy, o.children = batchv1alpha1.OnBusyReplace, []cronChild{going}
		}), cronCreate, at("10:05"), at("10:10"), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := decideCron(tc.obs)
			if got.step != tc.wantStep || !got.run.Equal(tc.wantRun) || !got.next.Equal(tc.wantNext) {
				t.Errorf("decideCron = %v run %v next %v, want %v run %v next %v", got.step, got.run, got.next, tc.wantStep, tc.wantRun, tc.wantNext)
			}
			var gone []string
			for _, c := range got.replace {
				gone = append(gone, c.name)
			}
			if !slices.Equal(gone, tc.wantGone) {
				t.Errorf("replace = %v, want %v", gone, tc.wantGone)
			}
		})
	}
}

// TestDecideCronFollowsTheClock steps a fake clock through an hour of a schedule every 15 minutes
// and takes every decision as the reconciler would: each scheduled time is due exactly once, and
// the requeue it asks for lands on the next one.
func TestDecideCronFollowsTheClock(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(at("10:01"))
	o := cronObservation{schedule: mustParse(t, "*/15 * * * *"), loc: time.UTC, since: at("10:01"),
		scopeAllowed: true, onBusy: batchv1alpha1.OnBusyQueue, successLimit: 3, failedLimit: 1}
	var runs []time.Time
	for clk.Now().Before(at("11:01")) {
		o.now = clk.Now()
		plan := decideCron(o)
		if plan.step == cronCreate {
			runs = append(runs, plan.run)
			o.since = plan.run
			continue // decide again in the same pass, as Reconcile does
		}
		if plan.step != cronIdle {
			t.Fatalf("at %v: step %v", o.now, plan.step)
		}
		clk.SetTime(plan.next) // the requeue fires
	}
	want := []time.Time{at("10:15"), at("10:30"), at("10:45"), at("11:00")}
	if !slices.EqualFunc(runs, want, time.Time.Equal) {
		t.Errorf("runs = %v, want %v", runs, want)
	}
}

// TestDecideCronTimeZone reads the schedule in spec.timeZone: 09:00 in Berlin is 08:00 UTC in winter.
func TestDecideCronTimeZone(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	o := cronObservation{now: at("08:30"), schedule: mustParse(t, "0 9 * * *"), loc: berlin, since: at("07:00"),
		scopeAllowed: true, onBusy: batchv1alpha1.OnBusyQueue}
	got := decideCron(o)
	if got.step != cronCreate || !got.run.Equal(at("08:00")) || !got.next.Equal(at("08:00").AddDate(0, 0, 1)) {
		t.Errorf("decideCron = %v run %v next %v, want Create at 08:00 UTC, next a day later", got.step, got.run, got.next)
	}
}

// TestMostRecentRunMatchesAWalk compares the look-back search with walking every scheduled time,
// over schedules with even and uneven gaps and outages from seconds to months.
func TestMostRecentRunMatchesAWalk(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, spec := range []string{"* * * * *", "*/7 * * * *", "0 9 * * 1-5", "0,1 0 1 * *", "30 2 29 2 *", "@hourly", "15 10 * JAN,JUL SUN"} {
		s := mustParse(t, spec)
		for range 200 {
			since := at("00:00").Add(time.Duration(rng.Int64N(int64(400 * 24 * time.Hour))))
			now := since.Add(time.Duration(rng.Int64N(int64(90 * 24 * time.Hour))))
			var want time.Time
			for tt := s.Next(since); !tt.IsZero() && !tt.After(now); tt = s.Next(tt) {
				want = tt
			}
			if got := mostRecentRun(s, time.UTC, since, now); !got.Equal(want) {
				t.Fatalf("%q since %v now %v: got %v, want %v", spec, since, now, got, want)
			}
		}
	}
}

// TestPruneHistory keeps the newest within each limit and never touches an unfinished LockedJob.
func TestPruneHistory(t *testing.T) {
	var children []cronChild
	add := func(name string, finished, succeeded, deleting bool) {
		children = append(children, cronChild{name: name, finished: finished, succeeded: succeeded, deleting: deleting})
	}
	add("ok1", true, true, false)
	add("bad1", true, false, false)
	add("ok2", true, true, false)
	add("running", false, false, false)
	add("bad2", true, false, false)
	add("ok3", true, true, true) // already going: not counted
	add("ok4", true, true, false)
	add("ok5", true, true, false)
	names := func(cs []cronChild) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.name)
		}
		return out
	}
	for _, tc := range []struct {
		success, failed int
		want            []string
	}{
		{3, 1, []string{"ok1", "bad1"}},
		{0, 0, []string{"ok1", "ok2", "ok4", "ok5", "bad1", "bad2"}},
		{10, 10, nil},
	} {
		if got := names(pruneHistory(children, tc.success, tc.failed)); !slices.Equal(got, tc.want) {
			t.Errorf("limits %d/%d: prune %v, want %v", tc.success, tc.failed, got, tc.want)
		}
	}
}

// TestParseScheduleRefusesWhatAdmissionCannot: the parser's errors become the ScheduleValid message.
func TestParseScheduleRefusesWhatAdmissionCannot(t *testing.T) {
	tz := func(s string) *string { return &s }
	for _, tc := range []struct {
		spec       batchv1alpha1.LockedCronJobSpec
		wantReason string
	}{
		{batchv1alpha1.LockedCronJobSpec{Schedule: "*/5 * * * *"}, ""},
		{batchv1alpha1.LockedCronJobSpec{Schedule: "@daily", TimeZone: tz("America/New_York")}, ""},
		{batchv1alpha1.LockedCronJobSpec{Schedule: "30-10 * * * *"}, batchv1alpha1.ReasonInvalidSchedule},
		{batchv1alpha1.LockedCronJobSpec{Schedule: "*/0 * * * *"}, batchv1alpha1.ReasonInvalidSchedule},
		{batchv1alpha1.LockedCronJobSpec{Schedule: "0 0 30 2 *"}, batchv1alpha1.ReasonInvalidSchedule},
		{batchv1alpha1.LockedCronJobSpec{Schedule: "@every 1m"}, batchv1alpha1.ReasonInvalidSchedule},
		{batchv1alpha1.LockedCronJobSpec{Schedule: "CRON_TZ=UTC * * * * *"}, batchv1alpha1.ReasonInvalidSchedule},
		{batchv1alpha1.LockedCronJobSpec{Schedule: "* * * * *", TimeZone: tz("Mars/Olympus_Mons")}, batchv1alpha1.ReasonInvalidTimeZone},
		{batchv1alpha1.LockedCronJobSpec{Schedule: "* * * * *", TimeZone: tz("Local")}, batchv1alpha1.ReasonInvalidTimeZone},
	} {
		s, _, reason, msg := parseSchedule(tc.spec, at("10:00"))
		if reason != tc.wantReason || (reason == "") != (s != nil) || (reason != "") != (msg != "") {
			t.Errorf("%q in %v: reason %q (%s), want %q", tc.spec.Schedule, tc.spec.TimeZone, reason, msg, tc.wantReason)
		}
	}
}

// TestActiveRefsStayWithinTheAPIBound lists the newest unfinished LockedJobs only, at most maxActive.
func TestActiveRefsStayWithinTheAPIBound(t *testing.T) {
	var children []cronChild
	for i := range maxActive + 6 {
		children = append(children, cronChild{name: fmt.Sprintf("run-%d", i)})
	}
	children = append(children, cronChild{name: "done", finished: true}, cronChild{name: "going", deleting: true})
	refs := activeRefs("ns", children)
	if len(refs) != maxActive {
		t.Fatalf("%d refs, want %d", len(refs), maxActive)
	}
	if first, last := refs[0].Name, refs[len(refs)-1].Name; first != "run-6" || last != fmt.Sprintf("run-%d", maxActive+5) {
		t.Errorf("refs from %s to %s, want the newest: run-6 to run-%d", first, last, maxActive+5)
	}
}
