package portdiff

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/taskport/taskport/test/contract"
)

// PairResult is the comparison of one engine with the reference engine.
type PairResult struct {
	Pair        string // "lease vs temporal"
	Divergences []Divergence
}

// Result is what one seed found.
type Result struct {
	Seed  uint64
	Pairs []PairResult
}

// Run draws the plan of seed, records it on every engine in parallel
// subtests, and compares each trace with the first engine's. Every
// divergence fails t, and the first one of each pair is printed with the
// seed, so that TASKPORT_PORTDIFF_SEED replays it.
func Run(t *testing.T, seed uint64, engines ...contract.Engine) Result {
	t.Helper()
	plan := NewPlan(seed)
	t.Logf("plan:\n%s", plan)
	traces := make([]Trace, len(engines))
	t.Run("engines", func(t *testing.T) {
		// Concurrent t.Run calls rather than t.Parallel: the engines of a
		// seed wait on their servers, not on the CPU, and -parallel
		// (GOMAXPROCS, 2 on CI) would run them one after the other.
		var wg sync.WaitGroup
		for i, eng := range engines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t.Run(eng.Name, func(t *testing.T) { traces[i] = Record(t, plan, eng) })
			}()
		}
		wg.Wait()
	})
	res := Result{Seed: seed}
	for i := 1; i < len(engines); i++ {
		divs := Compare(traces[0], traces[i])
		pair := engines[0].Name + " vs " + engines[i].Name
		res.Pairs = append(res.Pairs, PairResult{Pair: pair, Divergences: divs})
		if len(divs) == 0 {
			continue
		}
		all := make([]string, len(divs))
		for j, d := range divs {
			all[j] = "  " + d.String()
		}
		t.Errorf("seed %d, %s: %d divergence(s); first: %s\nall:\n%s\n%s trace:\n%s\n%s trace:\n%s",
			seed, pair, len(divs), divs[0], strings.Join(all, "\n"),
			traces[0].Engine, traces[0].Render(), traces[i].Engine, traces[i].Render())
	}
	return res
}

// Table renders a soak's results: per engine pair, the seeds run, the
// seeds that diverged, and the first divergence of each such seed.
func Table(results []Result) string {
	type row struct {
		seeds, diverged int
		firsts          []string
	}
	rows := map[string]*row{}
	var order []string
	for _, r := range results {
		for _, p := range r.Pairs {
			if rows[p.Pair] == nil {
				rows[p.Pair] = &row{}
				order = append(order, p.Pair)
			}
			rows[p.Pair].seeds++
			if len(p.Divergences) > 0 {
				rows[p.Pair].diverged++
				rows[p.Pair].firsts = append(rows[p.Pair].firsts, fmt.Sprintf("    seed %d (%d): %s", r.Seed, len(p.Divergences), p.Divergences[0]))
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-28s %6s %10s\n", "engine pair", "seeds", "divergent")
	for _, pair := range order {
		r := rows[pair]
		fmt.Fprintf(&b, "%-28s %6d %10d\n", pair, r.seeds, r.diverged)
		for _, f := range r.firsts {
			b.WriteString(f + "\n")
		}
	}
	return b.String()
}
