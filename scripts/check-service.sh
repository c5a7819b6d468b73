#!/usr/bin/env bash
# Checks the node daemon's systemd unit (packaging/systemd/flatcake.service) against a built or
# installed `flatcake`, without systemd running it: verifies the unit and its sysusers file, then
# runs the unit's own ExecStartPre and ExecStart command lines against a temporary configuration
# and pool, connects real clients, and stops the daemon as systemd would. Run with --help for
# the interface; docs/serve.md ("Running under systemd") says what the unit assumes.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: scripts/check-service.sh [OPTIONS] FLATCAKE_BIN

Checks the node daemon's systemd unit against FLATCAKE_BIN (a built or installed `flatcake`,
e.g. build/flatcake or PREFIX/bin/flatcake), without root and without systemd running it:

 1. `systemd-analyze verify` of a copy of the unit whose binary path (/usr/bin/flatcake) is
    FLATCAKE_BIN (verify refuses a unit whose binary does not exist). Any message about the unit,
    warning or error, fails the check; messages about other units are shown. The sysusers file
    through `systemd-sysusers --dry-run --root EMPTY`: it must create the unit's User=.
 2. The unit's ExecStartPre and ExecStart command lines, as written in the unit, with these
    paths standing in for the system's (in the command lines and in the configuration):
      /usr/bin/flatcake        FLATCAKE_BIN
      /etc/flatcake/node.toml  TMP/etc/node.toml: the example configuration (--example) with its
                               sizes made small (dram 32MiB, ssd 128MiB in 16MiB files),
                               [allow] uids = [this user], metrics_addr (if any) on port 0
      /run/flatcake            TMP/run (RuntimeDirectory=, made 0750 as systemd makes it)
      /var/lib/flatcake        TMP/state (StateDirectory=, the pool)
    and the unit's UMask=. ExecStartPre must check the file ExecStart reads, with the same
    other flags, and exit 0; ExecStart runs in the background and its socket (--socket on its
    command line, else the configuration's socket) must appear within --timeout seconds.
 3. Clients, each of which must succeed:
      FLATCAKE_BIN soak --client, for --client-seconds: a RemoteStore client putting, looking up
        and restoring its own keys on both media, every restored byte compared; it must have
        verified bytes and seen no wrong byte, corrupt block or error;
      then each --client CMD, run as `bash -c CMD` with FLATCAKE_SOCKET (the socket's path) and
        FLATCAKE_BIN in its environment, within --timeout seconds; it must exit 0.
 4. SIGTERM (the unit's KillSignal=): the daemon must exit 0 within the unit's TimeoutStopSec=
    and remove its socket.
Not checked here: the sandbox and the user themselves (they need systemd as PID 1 and root);
Type=notify's READY=1 (src/cli/serve_systemd_test.cc checks it).

Options:
  --unit FILE            the unit (default: packaging/systemd/flatcake.service of this tree)
  --sysusers FILE        its sysusers.d file (default: packaging/systemd/flatcake.sysusers)
  --example FILE         the example configuration for the unit (default:
                         packaging/systemd/node.toml)
  --client CMD           another client to run while the daemon serves (repeatable), e.g.
                         --client 'python3 -c "import flatcake; flatcake.connect(\"$FLATCAKE_SOCKET\", tenant=\"t\")"'
  --client-seconds N     how long the built-in client runs (default 3)
  --timeout N            seconds for the daemon to listen and for each --client (default 60)
  --keep                 keep the temporary directory (its path is printed)
  -h, --help             this text

Exit status: 0 when every check passed; 1 when one failed or could not run (systemd-analyze
or systemd-sysusers missing; the message names it, and the daemon's log follows); 2 for a usage
error. Temporaries and the daemon are cleaned up on every
exit path.
EOF
}

here=$(cd "$(dirname "$0")/.." && pwd)
unit=$here/packaging/systemd/flatcake.service
sysusers=$here/packaging/systemd/flatcake.sysusers
example=$here/packaging/systemd/node.toml
clients=()
client_seconds=3
timeout=60
keep=0
bin=

usage_error() {
  echo "check-service: $*" >&2
  echo "Try 'scripts/check-service.sh --help'." >&2
  exit 2
}

while (($#)); do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --unit | --sysusers | --example | --client | --client-seconds | --timeout)
      (($# >= 2)) || usage_error "$1 needs a value"
      case $1 in
        --unit) unit=$2 ;;
        --sysusers) sysusers=$2 ;;
        --example) example=$2 ;;
        --client) clients+=("$2") ;;
        --client-seconds) client_seconds=$2 ;;
        --timeout) timeout=$2 ;;
      esac
      shift 2 ;;
    --keep) keep=1; shift ;;
    -*) usage_error "unknown option $1" ;;
    *)
      [[ -z $bin ]] || usage_error "one FLATCAKE_BIN only (also got $1)"
      bin=$1; shift ;;
  esac
done
[[ -n $bin ]] || usage_error "no FLATCAKE_BIN given"
[[ $client_seconds =~ ^[1-9][0-9]*$ ]] || usage_error "--client-seconds takes a whole number > 0"
[[ $timeout =~ ^[1-9][0-9]*$ ]] || usage_error "--timeout takes a whole number > 0"
for f in "$unit" "$sysusers" "$example"; do
  [[ -f $f ]] || usage_error "no file $f"
done
[[ -f $bin && -x $bin ]] || usage_error "$bin is not an executable file"
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/flatcake-service.XXXXXX")
daemon_pid=
client_pid=
sleep_pid=

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  for pid in $sleep_pid $client_pid $daemon_pid; do
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  if ((keep)); then
    echo "check-service: kept $tmp" >&2
  else
    rm -rf "$tmp"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
  echo "check-service: FAILED: $*" >&2
  if [[ -s $tmp/daemon.log ]]; then
    echo "--- the daemon's log (last 40 lines):" >&2
    tail -n 40 "$tmp/daemon.log" >&2
  fi
  exit 1
}

for tool in systemd-analyze systemd-sysusers; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (package systemd): cannot check"
done

# The value of KEY= in the unit (the last assignment), empty when it has none.
unit_value() {
  sed -n "s/^$1=//p" "$unit" | tail -n 1
}

# --- 1. the unit and the sysusers file -------------------------------------------------------
unit_bin=$(unit_value ExecStart | awk '{print $1}')
[[ $unit_bin == /* ]] || fail "ExecStart= of $unit does not start with an absolute path"
mkdir -p "$tmp/verify"
verify_unit=$tmp/verify/$(basename "$unit")
sed "s#$unit_bin#$bin#g" "$unit" >"$verify_unit"
verify_rc=0
verify_out=$(systemd-analyze verify --recursive-errors=no --man=no "$verify_unit" 2>&1) ||
  verify_rc=$?
name=$(basename "$unit")
about_unit=$(grep -F -e "$name" <<<"$verify_out" || true)
others=$(grep -v -F -e "$name" <<<"$verify_out" || true)
[[ -z $others ]] || printf 'check-service: note: systemd-analyze on other units:\n%s\n' "$others" >&2
if ((verify_rc != 0)) || [[ -n $about_unit ]]; then
  fail "systemd-analyze verify (exit $verify_rc) on $unit:"$'\n'"$verify_out"
fi
echo "check-service: systemd-analyze verify $name: clean (binary $bin)"

user=$(unit_value User)
group=$(unit_value Group)
mkdir -p "$tmp/sysroot"
sysusers_out=$(systemd-sysusers --dry-run --root "$tmp/sysroot" "$sysusers" 2>&1) ||
  fail "systemd-sysusers --dry-run $sysusers:"$'\n'"$sysusers_out"
grep -q "Creating user '$user'" <<<"$sysusers_out" ||
  fail "$sysusers does not create the unit's User=$user:"$'\n'"$sysusers_out"
grep -q "Creating group '$group'" <<<"$sysusers_out" ||
  fail "$sysusers does not create the unit's Group=$group:"$'\n'"$sysusers_out"
echo "check-service: systemd-sysusers $(basename "$sysusers"): creates user $user, group $group"

# --- 2. the unit's command lines, with paths of our own ---------------------------------------
runtime_dir=$(unit_value RuntimeDirectory)
state_dir=$(unit_value StateDirectory)
umask_value=$(unit_value UMask)
[[ $runtime_dir =~ ^[a-z0-9_-]+$ ]] || fail "RuntimeDirectory='$runtime_dir': one plain name expected"
[[ $state_dir =~ ^[a-z0-9_-]+$ ]] || fail "StateDirectory='$state_dir': one plain name expected"
[[ $umask_value =~ ^0?[0-7]{3}$ ]] || fail "UMask='$umask_value': an octal mask expected"
mkdir -m 0750 "$tmp/run" "$tmp/state"
mkdir "$tmp/etc"

# A command line of the unit with our paths in it, one word per line of output. Run it in a
# command substitution whose failure ends the script (fail only ends the subshell).
stand_in() {
  local line=$1
  [[ $line =~ [\"\'\$%\\] ]] && fail "a command line with quotes, variables, specifiers or escapes: $line"
  [[ $line =~ ^[-@+!:] ]] && fail "a command line with an exec prefix: $line"
  line=${line//"$unit_bin"/$bin}
  line=${line//"$config_path"/$tmp/etc/node.toml}
  line=${line//"/run/$runtime_dir"/$tmp/run}
  line=${line//"/var/lib/$state_dir"/$tmp/state}
  for sys in /etc/ /run/ /var/ /usr/; do
    [[ " $line" != *" $sys"* ]] || fail "the command line names a system path this check has no stand-in for: $line"
  done
  tr ' ' '\n' <<<"$line" | sed '/^$/d'
}

start_line=$(unit_value ExecStart)
[[ $(grep -c '^ExecStart=' "$unit") == 1 ]] || fail "the unit must have one ExecStart= line"
config_path=$(sed -n 's/.* --config \([^ ]*\).*/\1/p' <<<"$start_line")
[[ -n $config_path ]] || fail "ExecStart= gives no --config FILE: $start_line"

# The example configuration with small sizes and our paths.
sed -e "s#/var/lib/$state_dir#$tmp/state#g" -e "s#/run/$runtime_dir#$tmp/run#g" \
  -e 's#^dram_bytes = .*#dram_bytes = "32MiB"#' \
  -e 's#^ssd_bytes = .*#ssd_bytes = "128MiB"#' \
  -e 's#^ssd_file_bytes = .*#ssd_file_bytes = "16MiB"#' \
  -e "s#^uids = .*#uids = [$(id -u)]#" \
  -e 's#^metrics_addr = .*#metrics_addr = "127.0.0.1:0"#' \
  "$example" >"$tmp/etc/node.toml"
for want in 'dram_bytes = "32MiB"' 'ssd_bytes = "128MiB"' 'ssd_file_bytes = "16MiB"' "$tmp/state"; do
  grep -qF "$want" "$tmp/etc/node.toml" ||
    fail "$example no longer has what this check makes small or moves ($want); update the check"
done

words=$(stand_in "$start_line")
mapfile -t argv <<<"$words"
start_flags=" ${argv[*]} "
start_flags=${start_flags/" --config $tmp/etc/node.toml "/ }
while IFS= read -r pre; do
  words=$(stand_in "$pre")  # a failure in there ends the script (set -e)
  mapfile -t argv <<<"$words"
  pre_flags=" ${argv[*]} "
  pre_flags=${pre_flags/" --check-config $tmp/etc/node.toml "/ }
  [[ $pre_flags == "$start_flags" ]] ||
    fail "ExecStartPre= does not check what ExecStart= runs (--check-config FILE for --config FILE, the same other flags):"$'\n'"  $pre"$'\n'"  $start_line"
  pre_rc=0
  pre_out=$( (umask "$umask_value" && exec "${argv[@]}") </dev/null 2>"$tmp/pre.err") || pre_rc=$?
  ((pre_rc == 0)) || fail "ExecStartPre exited $pre_rc: ${argv[*]}"$'\n'"$(cat "$tmp/pre.err")"
  echo "check-service: ExecStartPre: $pre_out"
done < <(sed -n 's/^ExecStartPre=//p' "$unit")

words=$(stand_in "$start_line")
mapfile -t argv <<<"$words"
socket=
for ((i = 0; i + 1 < ${#argv[@]}; i++)); do
  [[ ${argv[i]} != --socket ]] || socket=${argv[i + 1]}
done
if [[ -z $socket ]]; then
  socket=$(sed -n 's/^socket = "\(.*\)"$/\1/p' "$tmp/etc/node.toml")
fi
[[ -n $socket ]] || fail "neither ExecStart= nor the example configuration gives the socket"
(umask "$umask_value" && exec "${argv[@]}") </dev/null >"$tmp/daemon.out" 2>"$tmp/daemon.log" &
daemon_pid=$!
for ((waited = 0; waited < timeout * 10; waited++)); do
  [[ -S $socket ]] && break
  kill -0 "$daemon_pid" 2>/dev/null || break
  sleep 0.1
done
if [[ ! -S $socket ]]; then
  rc=0
  kill -0 "$daemon_pid" 2>/dev/null || { wait "$daemon_pid" || rc=$?; }
  daemon_pid=
  fail "ExecStart did not listen on $socket within ${timeout}s (exit status $rc if it ended): ${argv[*]}"
fi
echo "check-service: ExecStart: listening on $socket (pid $daemon_pid)"

# --- 3. clients --------------------------------------------------------------------------------
"$bin" soak --client --socket "$socket" --tenant check-service --slot 0 --seed 1 \
  >"$tmp/client.out" 2>"$tmp/client.err" &
client_pid=$!
# In the background: a signal's trap runs at once during `wait`, not after a foreground sleep.
sleep "$client_seconds" &
sleep_pid=$!
wait "$sleep_pid" || true
sleep_pid=
kill -TERM "$client_pid" 2>/dev/null || true
client_rc=0
wait "$client_pid" || client_rc=$?
client_pid=
counters=$(sed -n 's/^S //p' "$tmp/client.out" | tail -n 1)
counter() {
  [[ $counters =~ \"$1\":([0-9]+) ]] && echo "${BASH_REMATCH[1]}" || echo -1
}
problems=$(grep -E '^(E|W) ' "$tmp/client.out" | head -n 10 || true)
if ((client_rc != 0)) || [[ -z $counters ]] || (($(counter puts) <= 0)) ||
  (($(counter restore_hits) <= 0)) || (($(counter bytes_verified) <= 0)) ||
  (($(counter wrong_bytes) != 0)) || (($(counter corrupt) != 0)) || (($(counter errors) != 0)); then
  fail "the client (flatcake soak --client, exit $client_rc) did not round-trip cleanly:"$'\n'"${counters:-no counters}"$'\n'"$problems"$'\n'"$(tail -n 5 "$tmp/client.err")"
fi
echo "check-service: client: $(counter puts) puts, $(counter restores) restores," \
  "$(counter restore_hits) blocks restored, $(counter bytes_verified) bytes verified, no wrong byte"

for cmd in ${clients[@]+"${clients[@]}"}; do
  extra_rc=0
  FLATCAKE_SOCKET=$socket FLATCAKE_BIN=$bin timeout "$timeout" bash -c "$cmd" \
    >"$tmp/extra.out" 2>&1 || extra_rc=$?
  ((extra_rc == 0)) || fail "client '$cmd' exited $extra_rc:"$'\n'"$(tail -n 20 "$tmp/extra.out")"
  echo "check-service: client '$cmd': ok"
done

# --- 4. stop -----------------------------------------------------------------------------------
kill_signal=$(unit_value KillSignal)
stop_timeout=$(unit_value TimeoutStopSec)
stop_timeout=${stop_timeout%s}
[[ $stop_timeout =~ ^[0-9]+$ ]] || fail "TimeoutStopSec='$(unit_value TimeoutStopSec)': seconds expected"
kill "-${kill_signal:-SIGTERM}" "$daemon_pid" 2>/dev/null || fail "the daemon ended before ${kill_signal:-SIGTERM}"
for ((waited = 0; waited < stop_timeout * 10; waited++)); do
  kill -0 "$daemon_pid" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$daemon_pid" 2>/dev/null && fail "the daemon did not stop within ${stop_timeout}s of ${kill_signal:-SIGTERM}"
stop_rc=0
wait "$daemon_pid" || stop_rc=$?
daemon_pid=
((stop_rc == 0)) || fail "the daemon exited $stop_rc after ${kill_signal:-SIGTERM}"
[[ ! -e $socket ]] || fail "the daemon left its socket $socket behind"
echo "check-service: ${kill_signal:-SIGTERM}: exit 0, socket removed"
echo "check-service: ok"
