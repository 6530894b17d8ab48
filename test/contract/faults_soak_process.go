package contract

import (
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"
)

// SoakEnv names the environment variable that sets how many times RunFaults
// repeats every fault scenario per engine. Unset means once, with the
// ordinary pass/fail; N > 1 also prints a table of anomalies per scenario
// and engine, and one of the durations the scenarios measured (median and
// p95 by nearest rank, max), which no test fails on (run with -v to see
// them):
//
//	TASKPORT_SOAK=20 go test ./test/ -run TestFaults -v -timeout 2h
const SoakEnv = "TASKPORT_SOAK"

// RunFaults runs every fault scenario (process faults, then the DB faults
// that run on the scenario's database) against every engine, as
// TestX/<engine>/<scenario>[/repNN].
func RunFaults(t *testing.T, engines ...Engine) {
	s := newSoak(t)
	eachCell(t, engines, slices.Concat(processFaults, dbFaults, businessFaults), func(t *testing.T, eng Engine, sc scenario) {
		s.cell(t, eng.Name, sc.name, func(w *world) {
			w.pool = newScenarioDB(w.t)
			w.engine = eng
			w.factory = eng.Open(w.t, w.pool)
			sc.run(w)
		})
	})
}

// soak repeats scenarios and tallies what went wrong in each cell of
// scenario x engine.
type soak struct {
	reps  int
	mu    sync.Mutex
	cells []*soakCell
}

type soakCell struct {
	scenario, engine string
	reps             int
	anomalies        int // business-truth checks that failed (world.expect)
	failedReps       int // repetitions that failed
	first            string
	durations        map[string][]time.Duration // what the repetitions measured (world.measure)
}

func newSoak(t *testing.T) *soak {
	t.Helper()
	s := &soak{reps: 1}
	if v := os.Getenv(SoakEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number of repetitions", SoakEnv, v)
		}
		s.reps = n
	}
	// Cleanup runs after every parallel subtest has finished.
	t.Cleanup(func() {
		if s.reps > 1 {
			t.Logf("soak: %d repetitions per scenario and engine\n%s", s.reps, s.table())
		}
	})
	return s
}

// cell runs fn s.reps times; with more than one repetition each is a
// subtest of its own, run one after the other. fn gets a world holding only
// its test and fills in the rest.
func (s *soak) cell(t *testing.T, engine, scenario string, fn func(w *world)) {
	c := &soakCell{scenario: scenario, engine: engine, durations: map[string][]time.Duration{}}
	s.mu.Lock()
	s.cells = append(s.cells, c)
	s.mu.Unlock()
	once := func(t *testing.T) {
		w := &world{t: t}
		// Deferred so that a repetition ended by require (FailNow) counts.
		defer func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			c.reps++
			c.anomalies += len(w.anomalies)
			for name, d := range w.durations {
				c.durations[name] = append(c.durations[name], d)
			}
			if t.Failed() {
				c.failedReps++
				if c.first == "" {
					c.first = t.Name()
					if len(w.anomalies) > 0 {
						c.first += ": " + w.anomalies[0]
					}
				}
			}
		}()
		fn(w)
	}
	if s.reps == 1 {
		once(t)
		return
	}
	for i := range s.reps {
		t.Run(fmt.Sprintf("rep%02d", i+1), once)
	}
}

func (s *soak) table() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	cells := slices.Clone(s.cells)
	slices.SortFunc(cells, func(a, b *soakCell) int {
		return strings.Compare(a.scenario+"\x00"+a.engine, b.scenario+"\x00"+b.engine)
	})
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tengine\trepetitions\tanomalies\tfailed reps\tfirst failure")
	for _, c := range cells {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", c.scenario, c.engine, c.reps, c.anomalies, c.failedReps, c.first)
	}
	measured := false
	for _, c := range cells {
		measured = measured || len(c.durations) > 0
	}
	if measured {
		fmt.Fprintln(tw, "\nscenario\tengine\tmeasure (from the signal, Postgres clock)\tsamples\tmedian\tp95\tmax")
		for _, c := range cells {
			for _, name := range slices.Sorted(maps.Keys(c.durations)) {
				ds := slices.Sorted(slices.Values(c.durations[name]))
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", c.scenario, c.engine, name, len(ds),
					rank(ds, 0.5), rank(ds, 0.95), ds[len(ds)-1].Round(time.Millisecond))
			}
		}
		fmt.Fprintln(tw, "\ngoal: a killed or frozen worker's run taken over and finished within 10 s, on Temporal with every server setting at its default too (TASKPORT_SERVER_DEFAULTS=1)")
	}
	_ = tw.Flush() // writes to a strings.Builder, which does not fail
	return b.String()
}

// rank is the nearest-rank q-quantile of sorted, non-empty ds.
func rank(ds []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[max(i, 0)].Round(time.Millisecond)
}
