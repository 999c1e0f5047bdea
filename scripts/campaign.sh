#!/usr/bin/env bash
# The leaderboard campaign (docs/results/standard): every method at its pinned clean commit.
#
#   scripts/campaign.sh WORK plan   # every phase's dry run: runs left and expected hours
#   scripts/campaign.sh WORK run    # run what is left (resumes; the longest runs first)
#   scripts/campaign.sh WORK sync   # copy finished runs into docs/results/standard (and the
#                                   # claims' own rows into docs/results/claims-rows), re-render
#
# WORK is a folder outside the repository: WORK/clones/<commit> (clean clones of this
# repository), WORK/results (the bench's results folder, first filled with the committed
# records, so a wiped machine resumes where the committed board stands). Each method runs from
# the commit PINS names; a change that alters a method's replay fixture pins it anew and its
# runs at the old commit are withdrawn (tests/test_standard_board.py checks one clean commit a
# method). Phases, as docs/testbed.md decides them: first the easy seeds of the rows in FIRST
# (seeds 0-4, then 5-9 where scripts/easy_seeds.py chooses them among those rows), then hard
# seeds 0-9, easy seeds 0-4, easy seeds 5-9 for the rows scripts/easy_seeds.py chooses, then the
# claims' own rows (reproduce gtpo, oppo): the board is whole before those two hours of runs,
# which it never reads.
# Run it in the background: nohup scripts/campaign.sh WORK run >> WORK/log 2>&1 &
set -eu -o pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=${1:?usage: scripts/campaign.sh WORK plan|run|sync}
ACTION=${2:?usage: scripts/campaign.sh WORK plan|run|sync}
STANDARD=$REPO/docs/results/standard
CLAIMS_ROWS=$REPO/docs/results/claims-rows  # docs/testbed.md, "The claims' own rows"
HARD='chain-hard-steps=10-slip_rate=0.1-weak_slip_rate=0.3-direct_slip_rate=0.65'
EASY='chain-easy-steps=8'
# commit: the methods it runs (the order is the campaign's priority)
PINS=(
  "0cf6a21 ccpo dapo forking gtpo ibpo int"
  "d004646 mig"
  "2f61b27 pppo spo"
  "80c549a prime"
  "75b6117 grpo oracle ktae otb drgrpo dfpo gspo oppo reinforce_pp reinforce_pp_baseline rloo rrpo scapo sdpo srpo tempo tspmo vineppo"
)

# Rows whose easy seeds go before everything else: the methods issue's seven methods, with GRPO
# and the oracle they are read against (their hard seeds 0-9 are all in). The seeds-5-9 rule is
# one method at a time, so applying it to these rows first chooses what it would choose later.
FIRST=(grpo oracle int mig pppo spo ktae otb gtpo)

pin_of() {  # the commit that runs method $1
  local line
  for line in "${PINS[@]}"; do
    for m in ${line#* }; do [ "$m" = "$1" ] && { echo "${line%% *}"; return; }; done
  done
  echo "campaign: no pinned commit for method $1 (add it to PINS)" >&2; return 2
}

checkout() {  # a clean clone of commit $1 and the package path that imports it
  local sha=$1 clone=$WORK/clones/$1
  if [ ! -d "$clone" ]; then
    git clone -q "$REPO" "$clone" && git -C "$clone" checkout -q "$sha"
  fi
  [ -z "$(git -C "$clone" status --porcelain)" ] || { echo "campaign: $clone is dirty" >&2; exit 2; }
  mkdir -p "$WORK/pkg/$sha" && ln -sfn "$clone" "$WORK/pkg/$sha/creditbench"
}

cb() {  # cb COMMIT ARGS...: the creditbench CLI of that clone (harness/cli before tools/ existed)
  local sha=$1; shift
  local module=creditbench.tools.cli.main
  [ -f "$WORK/clones/$sha/tools/cli/main.py" ] || module=creditbench.harness.cli.main
  PYTHONPATH=$WORK/pkg/$sha python -m "$module" "$@"
}

bench() {  # bench COMMIT SEEDS PREFIX METHOD...
  local sha=$1 seeds=$2 prefix=$3; shift 3
  local only=() m
  for m in "$@"; do only+=(--only "$prefix-$m-s*"); done
  echo "=== $(date -u +%FT%TZ) $sha seeds $seeds ${prefix%%-steps*}: $*"
  cb "$sha" bench --suite standard --results "$WORK/results" --workers 2 --threads 1 \
    --seeds "$seeds" "${only[@]}" ${DRY:+--dry-run} || echo "=== bench exited $? (see above)"
}

every_pin() {  # every_pin SEEDS PREFIX [METHOD...]: bench each commit's methods (those named)
  local seeds=$1 prefix=$2 line m picked; shift 2
  for line in "${PINS[@]}"; do
    picked=()
    for m in ${line#* }; do
      if [ $# -eq 0 ] || [[ " $* " == *" $m "* ]]; then picked+=("$m"); fi
    done
    [ ${#picked[@]} -eq 0 ] || bench "${line%% *}" "$seeds" "$prefix" "${picked[@]}"
  done
}

easy_5_9() {  # easy_5_9 all|A,B: the rows scripts/easy_seeds.py chooses run easy seeds 5-9
  local chosen m
  if ! chosen=$(python "$REPO/scripts/easy_seeds.py" "$WORK/results" --methods "$1" 2>&1); then
    echo "easy seeds 5-9 wait: $chosen"; return 0
  fi
  # shellcheck disable=SC2086  # one method a word
  every_pin 5-9 "$EASY" $chosen  # one bench a commit: its runs share the two workers
}

restore() {  # the committed records into the results folder (the bench skips finished runs)
  mkdir -p "$WORK/results"
  local run
  for run in "$STANDARD"/chain-*/; do
    run=${run%/}
    [ -e "$WORK/results/${run##*/}" ] || cp -r "$run" "$WORK/results/"
  done
}

seed_cache() {  # the package's teachers into the cache: a pinned clone older than one finds it there
  local cache=${CREDITBENCH_CACHE:-$HOME/.cache/creditbench} entry
  mkdir -p "$cache/teacher"
  for entry in "$REPO"/harness/assets/teacher/*/; do
    entry=${entry%/}
    [ -e "$cache/teacher/${entry##*/}" ] || cp -r "$entry" "$cache/teacher/"
  done
}

campaign() {
  local line m
  for line in "${PINS[@]}"; do checkout "${line%% *}"; done
  restore
  seed_cache
  every_pin 0-4 "$EASY" "${FIRST[@]}"
  easy_5_9 "$(IFS=,; echo "${FIRST[*]}")"
  every_pin 0-9 "$HARD"
  every_pin 0-4 "$EASY"
  easy_5_9 all
  local records=(--records "$WORK/results")  # and the committed claims' rows: a wiped
  [ -d "$CLAIMS_ROWS" ] && records+=(--records "$CLAIMS_ROWS")  # machine skips them too
  for m in gtpo oppo; do  # the claims' own rows, from the commit that ran the method's rows
    echo "=== $(date -u +%FT%TZ) reproduce $m"
    cb "$(pin_of "$m")" reproduce "$m" --scale cpu --results "$WORK/claims-$m" \
      "${records[@]}" --workers 2 ${DRY:+--dry-run} || echo "=== reproduce exited $?"
  done
  echo "=== $(date -u +%FT%TZ) campaign done"
}

copy_run() {  # copy_run RUN DEST [NOTE]: a finished run's records into DEST, named with its commit
  local run=$1 dest=$2/${1##*/} sha
  mkdir -p "$dest"
  cp "$run"/{config.yaml,environment.json,metrics.jsonl,summary.json} "$dest/"
  sha=$(python -c "import json,sys; print(json.load(open(sys.argv[1]))['git_commit'][:7])" \
    "$run/environment.json")
  echo "new: ${run##*/} $sha${3:+ ($3)}"
}

write_whole() {  # write_whole FILE COMMAND...: the command's output into FILE, whole or not at all
  local file=$1; shift
  "$@" > "$file.part" || { rm -f "$file.part"; exit 2; }
  mv "$file.part" "$file"
}

sync_board() {  # finished runs into the repository; then the board, the claims, the home page
  local run
  for run in "$WORK"/results/chain-*/; do
    run=${run%/}
    [ -f "$run/summary.json" ] && [ ! -e "$STANDARD/${run##*/}" ] || continue
    copy_run "$run" "$STANDARD"
  done
  # the claims' own rows (variants the suite does not run), beside the board, never in it
  for run in "$WORK"/claims-*/chain-*/; do
    [ -d "$run" ] || continue
    run=${run%/}
    [ -f "$run/summary.json" ] && [ ! -e "$STANDARD/${run##*/}" ] && [ ! -e "$WORK/results/${run##*/}" ] \
      && [ ! -e "$CLAIMS_ROWS/${run##*/}" ] || continue
    copy_run "$run" "$CLAIMS_ROWS" "claims' row"
  done
  cd "$REPO"
  # the board counts its runs against the campaign's plan: the suite less the easy seeds 5-9
  # the rule has not chosen (scripts/easy_seeds.py --plan)
  write_whole "$STANDARD/suite-standard.json" python scripts/easy_seeds.py "$STANDARD" --plan
  creditbench leaderboard docs/results/standard >/dev/null
  local claims=(docs/results/standard/runs.csv)
  if [ -d "$CLAIMS_ROWS" ]; then  # their plan, so the claims page says how many have run
    write_whole "$CLAIMS_ROWS/suite-claims-rows.json" python scripts/claims_rows_plan.py
    creditbench leaderboard "$CLAIMS_ROWS" --records-only >/dev/null
    claims+=("${CLAIMS_ROWS#"$REPO"/}/runs.csv")
  fi
  creditbench claims "${claims[@]}" --out docs/results/claims.md >/dev/null
  python scripts/home_headline.py docs/results/standard/runs.csv docs/index.md --explain
}

case $ACTION in
  plan) DRY=1 campaign ;;
  run) campaign ;;
  sync) sync_board ;;
  *) echo "campaign: ACTION must be plan, run or sync (got $ACTION)" >&2; exit 2 ;;
esac
