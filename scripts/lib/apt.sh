# Sourced by setup.sh and test-tools.sh: installs Debian packages that are missing, with sudo only when
# not root. The two scripts may run at the same time (scripts/test.sh starts them together), and other
# checkouts on the machine may too: one lock keeps their apt-get runs apart.
apt_install_missing() {
  local missing=() package
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  (
    flock 9
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  ) 9>"${TMPDIR:-/tmp}/mcpgw-apt.lock"
}
