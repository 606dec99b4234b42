#!/usr/bin/env bash
# bench-compare.sh [-n ROUNDS] [-b BENCH] [-t BENCHTIME] [-p PKG] BASE
#
# Go benchmarks before and after a change, interleaved in one run: the
# package's test binary is built at BASE (a commit, in a temporary git
# worktree) and from the working tree, and the two run in turn, ROUNDS
# times each (before, after, before, after, ...), so that a noisy
# neighbour or a clock change on a shared machine falls on both alike.
# It prints every run's lines, then one row per benchmark and metric: the
# median before, the median after, after/before, and paired: the median of
# each round's own after/before, with their range, which a drift of the
# machine's pace over the run moves less. For ns/op and the other time
# metrics (ms/step, ns/elem) a ratio below 1 is faster; for rates
# (GFLOP/s, GB/s, tokens/s) above 1 is.
#
#   scripts/bench-compare.sh -b 'BenchmarkStep' -p ./train a2ae036
#   scripts/bench-compare.sh -b 'BenchmarkKernels/f32' -p ./cuda/host -n 3 HEAD~2
#
# Defaults: ROUNDS 5, BENCH . (every benchmark), BENCHTIME 1x, PKG ./train.
# Needs git and Go; run it from anywhere in the repository.
set -euo pipefail

rounds=5 bench=. benchtime=1x pkg=./train
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts n:b:t:p:h opt; do
	case $opt in
	n) rounds=$OPTARG ;;
	b) bench=$OPTARG ;;
	t) benchtime=$OPTARG ;;
	p) pkg=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || usage
base=$1
case $rounds in '' | *[!0-9]* | 0) echo "bench-compare: -n $rounds: want a whole number of rounds, 1 or more" >&2; exit 2 ;; esac
case $pkg in ./*) ;; *) echo "bench-compare: -p $pkg: want a package directory relative to the repository root, e.g. ./train" >&2; exit 2 ;; esac

root=$(git rev-parse --show-toplevel)
cd "$root"
[ -d "$pkg" ] || { echo "bench-compare: -p $pkg: no such directory in $root" >&2; exit 2; }
rev=$(git rev-parse --verify --quiet "$base^{commit}") || { echo "bench-compare: $base: not a commit here (want a hash, a branch or HEAD~N)" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tmp/before" >/dev/null 2>&1 || true; rm -rf "$tmp"; git -C "$root" worktree prune' EXIT
git worktree add --detach --quiet "$tmp/before" "$rev"

echo "building $pkg's benchmarks at ${rev:0:12} (before) and from the working tree (after)" >&2
(cd "$tmp/before/$pkg" && go test -c -o "$tmp/before.test" .)
(cd "$root/$pkg" && go test -c -o "$tmp/after.test" .)

: >"$tmp/runs"
for r in $(seq "$rounds"); do
	for side in before after; do
		dir=$tmp/before/$pkg
		[ $side = after ] && dir=$root/$pkg
		echo "round $r/$rounds: $side" >&2
		(cd "$dir" && "$tmp/$side.test" -test.run '^$' -test.bench "$bench" -test.benchtime "$benchtime") >"$tmp/out" 2>&1 || {
			cat "$tmp/out" >&2
			echo "bench-compare: the $side binary failed in round $r" >&2
			exit 1
		}
		if ! grep -q '^Benchmark' "$tmp/out"; then
			echo "bench-compare: the $side binary ran no benchmark matching -b $bench (round $r)" >&2
			continue
		fi
		grep '^Benchmark' "$tmp/out" | sed "s/^/$side $r /" | tee -a "$tmp/runs"
	done
done

[ -s "$tmp/runs" ] || { echo "bench-compare: no benchmark matching -b $bench ran on either side" >&2; exit 1; }

echo
echo "medians of $rounds interleaved rounds; after/before < 1 is faster for times, > 1 for rates;"
echo "paired: the median of each round's after/before (its range in brackets)"
awk '
{
	side = $1; round = $2; name = $3
	sub(/-[0-9]+$/, "", name)
	# fields: side round name iterations value unit value unit ...
	for (i = 5; i + 1 <= NF; i += 2) {
		key = name SUBSEP $(i + 1)
		if (!(key in seen)) { seen[key] = 1; order[++n] = key }
		vals[side, key, ++cnt[side, key]] = $i
		# the pairs: the first value of a key in a round, on each side
		if (!((side, key, round) in byRound)) byRound[side, key, round] = $i
	}
	if (round > rounds) rounds = round
}
function median(a, m,    i, j, t) {
	for (i = 2; i <= m; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
	return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
}
function sideMedian(side, key,    m, a, i) {
	m = cnt[side, key]
	if (m == 0) return ""
	for (i = 1; i <= m; i++) a[i] = vals[side, key, i] + 0
	return median(a, m)
}
END {
	printf "%-58s %-9s %12s %12s %12s %22s\n", "benchmark", "metric", "before", "after", "after/before", "paired"
	for (k = 1; k <= n; k++) {
		key = order[k]
		split(key, p, SUBSEP)
		b = sideMedian("before", key); a = sideMedian("after", key)
		if (b == "" || a == "") { printf "%-58s %-9s %12s %12s %12s %22s\n", p[1], p[2], b == "" ? "-" : b, a == "" ? "-" : a, "-", "-"; continue }
		paired = "-"
		np = 0
		delete r
		for (i = 1; i <= rounds; i++)
			if (("before", key, i) in byRound && ("after", key, i) in byRound && byRound["before", key, i] + 0 != 0)
				r[++np] = byRound["after", key, i] / byRound["before", key, i]
		if (np > 0) {
			lo = r[1]; hi = r[1]
			for (i = 1; i <= np; i++) { if (r[i] < lo) lo = r[i]; if (r[i] > hi) hi = r[i] }
			paired = sprintf("%.3f [%.3f-%.3f]", median(r, np), lo, hi)
		}
		printf "%-58s %-9s %12.4g %12.4g %12s %22s\n", p[1], p[2], b, a, b == 0 ? "-" : sprintf("%.3f", a / b), paired
	}
}' "$tmp/runs"
