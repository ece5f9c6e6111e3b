#!/usr/bin/env bash
# Checks deploy/systemd/orchestrator.service with `systemd-analyze verify`:
# the unit as shipped, then with its commented settings (the memory lessons,
# the extra ReadWritePaths) switched on, so they are right when someone
# enables them. Any message fails the check: verify exits 0 on a misspelt key
# or an unparseable value, which it only warns about ("ignoring").
#
# Usage: scripts/verify-unit.sh BINARY
#   BINARY is a built orchestrator; it stands at the unit's ExecStart path
#   inside a scratch root, because verify refuses a unit whose command is
#   not executable. No systemd needs to run (it works in a container whose
#   PID 1 is not systemd); `systemd-analyze` comes from Debian's `systemd`.
set -euo pipefail
cd "$(dirname "$0")/.."

bin="${1:?usage: scripts/verify-unit.sh PATH/TO/orchestrator}"
unit=deploy/systemd/orchestrator.service
[ -x "$bin" ] || { echo "verify-unit: $bin is not an executable orchestrator" >&2; exit 2; }
command -v systemd-analyze >/dev/null || {
  echo "verify-unit: systemd-analyze is missing (apt-get install systemd)" >&2
  exit 1
}

exec_path="$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$unit")"
[ -n "$exec_path" ] || { echo "verify-unit: $unit has no ExecStart=" >&2; exit 1; }

# A scratch root: the distribution's units (verify resolves the targets the
# unit is ordered against inside the root), the binary at ExecStart's path.
root="$(mktemp -d "${TMPDIR:-/tmp}/orch-unit-root.XXXXXX")"
trap 'rm -rf "$root"' EXIT
units_dir=/usr/lib/systemd/system
[ -d "$units_dir" ] || units_dir=/lib/systemd/system
mkdir -p "$root/usr/lib/systemd" "$root/etc/systemd/system" "$root$(dirname "$exec_path")"
cp -a "$units_dir" "$root/usr/lib/systemd/"
ln "$bin" "$root$exec_path" 2>/dev/null || cp "$bin" "$root$exec_path"

# verify UNIT_TEXT NAME: fails on a non-zero exit or on any message.
verify() {
  printf '%s\n' "$1" >"$root/etc/systemd/system/orchestrator.service"
  local out rc=0
  out="$(systemd-analyze verify --root="$root" orchestrator.service 2>&1)" || rc=$?
  if [ "$rc" != 0 ] || [ -n "$out" ]; then
    echo "verify-unit: $2: systemd-analyze verify exit $rc:" >&2
    printf '%s\n' "$out" >&2
    return 1
  fi
}

shipped="$(cat "$unit")"
# The commented settings switched on (the prose comments stay comments).
enabled="$(sed -E 's/^#((MemoryMax|MemorySwapMax|OOMPolicy|ReadWritePaths)=)/\1/' "$unit")"
for key in MemoryMax MemorySwapMax OOMPolicy; do
  grep -q "^#$key=" "$unit" || { echo "verify-unit: $unit lost its commented $key=" >&2; exit 1; }
done

verify "$shipped" "the unit as shipped"
verify "$enabled" "the unit with its commented settings enabled"

# The check itself: a unit with a misspelt value must fail it.
if verify "${shipped/Type=notify/Type=notfy}" "a deliberately broken copy" 2>/dev/null; then
  echo "verify-unit: a unit with Type=notfy passed: the check checks nothing" >&2
  exit 1
fi
echo "verify-unit: $unit verified (as shipped and with its commented settings)"
