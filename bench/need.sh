# Sourced by the bench scripts (from the repository's root): `need TOOL…` installs the Debian
# packages of the tools that are missing (memcached, redis-server, strace, …); `need_release`
# builds the release binaries (strata, strata-bench) when they are not there yet.
need() {
  local missing="" t
  for t in "$@"; do command -v "$t" >/dev/null || missing="$missing $t"; done
  [ -n "$missing" ] || return 0
  local sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
}
need_release() {
  [ -x .build/release/strata ] && [ -x .build/release/strata-bench ] || make -s release >/dev/null
}
