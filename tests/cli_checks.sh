# The test scripts' shared checks (sourced by export_predict.sh and int8_e2e.sh): pass and fail
# count into $fails; expect runs a command that must fail cleanly.
pass() { echo "ok: $1"; }
fail() { echo "FAILED: $1"; fails=$((fails + 1)); }
# expect CODE PATTERN -- CMD...: exit code and a stderr line matching PATTERN (plus --help's hint).
expect() {
  local code="$1" pattern="$2" err rc
  shift 3
  err=$("$@" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" = "$code" ] && grep -q -- "$pattern" <<<"$err" && [ "$(wc -l <<<"$err")" -le 2 ]; then
    pass "$(basename "$1") ${*:2} -> exit $rc"
  else
    fail "$(basename "$1") ${*:2} -> exit $rc (want $code, /$pattern/), stderr: $err"
  fi
}
