#!/usr/bin/env bash
# Prices the lease engine's two-row layout (a taskport.run row and a task
# row per run) against a one-row layout (one_row.sql: the lease state in
# taskport.run), statement shapes alike, with pgbench (issue 14: why
# EnqueueMany trails River's InsertMany). Layouts:
#   two         today's (enqueue_two.sql, work_two.sql);
#   one         one row; a claim leaves the run's status alone, so it can
#               be a HOT update (enqueue_one.sql, work_one.sql);
#   one_ff80    the same, taskport.run at fillfactor 80, so that more
#               claims find room for a HOT update on their page;
#   one_status  one row; a claim sets the status to running, as the task
#               row's claim does today (work_one_status.sql).
# Per round and layout, on a fresh database: one client enqueues $BATCHES
# (40) batches of 1000 runs, then 8 clients run 1000 runs each of a
# three-step kind through claim, steps and finish, each statement its own
# transaction. Rounds rotate the layouts' order; the table gives medians,
# and the rows say how many updates of taskport.run and of the task table
# were HOT.
#
#   bench/cmd/compare/onerow/run.sh [rounds]     (TEST_DATABASE_URL: an admin database)
set -euo pipefail
cd "$(dirname "$0")"
rounds=${1:-5}
batches=${BATCHES:-40}
admin=${TEST_DATABASE_URL:?TEST_DATABASE_URL is required}
base=${admin%%\?*}
base=${base%/*}
query=${admin#"$base"}
query=${query#/*\?}
[ "$query" = "$admin" ] && query=""
dsn() { echo "$base/$1${query:+?$query}"; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd ../../../.. && go build -o "$work/taskport" ./cmd/taskport)

layouts=(two one one_ff80 one_status)
psql -qX "$admin" -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
SELECT format('DROP DATABASE %I', datname) FROM pg_database WHERE datname LIKE 'tp_onerow_%' \gexec
SQL
for l in "${layouts[@]}"; do
  psql -qX "$admin" -c "CREATE DATABASE tp_onerow_tmpl_$l" >/dev/null
  "$work/taskport" migrate up --database-url "$(dsn tp_onerow_tmpl_$l)" --log-level error >/dev/null
  psql -qX "$(dsn tp_onerow_tmpl_$l)" -v ON_ERROR_STOP=1 -f common.sql >/dev/null
  case $l in
    one|one_status) psql -qX "$(dsn tp_onerow_tmpl_$l)" -v ON_ERROR_STOP=1 -f one_row.sql >/dev/null ;;
    one_ff80) psql -qX "$(dsn tp_onerow_tmpl_$l)" -v ON_ERROR_STOP=1 -f one_row.sql \
      -c 'ALTER TABLE taskport.run SET (fillfactor = 80)' >/dev/null ;;
  esac
done

# tps reads pgbench's rate, and fails unless every transaction ran (a
# claim that finds no run aborts its client).
tps() {
  local out
  out=$(cat)
  if ! grep -Eq '^number of transactions actually processed: ([0-9]+)/\1$' <<<"$out" || grep -q aborted <<<"$out"; then
    echo "pgbench did not complete: $out" >&2
    return 1
  fi
  sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' <<<"$out"
}
for r in $(seq 1 "$rounds"); do
  for k in "${!layouts[@]}"; do
    l=${layouts[$(( (r + k) % ${#layouts[@]} ))]}
    db=tp_onerow_r${r}_$l
    psql -qX "$admin" -c "CREATE DATABASE $db TEMPLATE tp_onerow_tmpl_$l" >/dev/null
    case $l in
      two) escript=enqueue_two.sql wscript=work_two.sql ;;
      one|one_ff80) escript=enqueue_one.sql wscript=work_one.sql ;;
      one_status) escript=enqueue_one.sql wscript=work_one_status.sql ;;
    esac
    enq=$(pgbench -n -M prepared -c 1 -t "$batches" -f "$escript" "$(dsn "$db")" 2>&1 | tps)
    wrk=$(pgbench -n -M prepared -c 8 -j 2 -t 1000 -f "$wscript" "$(dsn "$db")" 2>&1 | tps)
    hot=$(psql -qXAt "$(dsn "$db")" -c "SELECT string_agg(relname || ' ' || n_tup_hot_upd || '/' || n_tup_upd, ', ' ORDER BY relname)
      FROM pg_stat_user_tables WHERE relname IN ('run', 'task') AND n_tup_upd > 0")
    psql -qX "$admin" -c "DROP DATABASE $db" >/dev/null
    echo "round $r $l enqueue $(awk -v t="$enq" 'BEGIN{printf "%.0f", t*1000}') work $(awk -v t="$wrk" 'BEGIN{printf "%.0f", t}') hot $hot" | tee -a "$work/rows" >&2
  done
done
for l in "${layouts[@]}"; do psql -qX "$admin" -c "DROP DATABASE tp_onerow_tmpl_$l" >/dev/null; done

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
printf '\n%-11s %16s %14s %10s %10s\n' layout "enqueue runs/s" "work runs/s" "enq/two" "work/two"
e2=$(awk '$3=="two"{print $5}' "$work/rows" | median)
w2=$(awk '$3=="two"{print $7}' "$work/rows" | median)
for l in "${layouts[@]}"; do
  e=$(awk -v l="$l" '$3==l{print $5}' "$work/rows" | median)
  w=$(awk -v l="$l" '$3==l{print $7}' "$work/rows" | median)
  printf '%-11s %16.0f %14.0f %9.2fx %9.2fx\n' "$l" "$e" "$w" "$(awk -v a="$e" -v b="$e2" 'BEGIN{print a/b}')" "$(awk -v a="$w" -v b="$w2" 'BEGIN{print a/b}')"
done
