#!/bin/sh
# Installs the Fleet edge agent on this device and enrols it with the broker that served this script:
#
#   curl -fsSL https://<broker>/install.sh -o fleet-install.sh
#   printf '%s\n' '<key>' | sudo sh fleet-install.sh --bootstrap-key-stdin
#
# It picks the .deb (Debian-like systems whose nodejs >= 20 is a Debian package) or the tarball (any
# other Linux with node >= 20 on the PATH), downloads it from the same broker (GET /install/<file>),
# checks its SHA-256 against the digest the broker wrote into this script (so a package altered on
# the way is refused before anything is installed), installs it, writes the broker URL into
# /etc/fleet-agent/config.json, the bootstrap key into /etc/fleet-agent/bootstrap-key (root only,
# 0600: the running agent reads it from there) and the broker's public signing key into
# /var/lib/fleet-agent/broker-key.pem (the key the agent trusts), then enables and starts the
# fleet-agent systemd service. The bootstrap key is never taken from the command line (sudo logs
# command lines, ps shows them).
#
# Options:
#   --bootstrap-key-file <file>  read the key to enrol with (from the console's Bootstrap keys screen)
#                                from <file>
#   --bootstrap-key-stdin        read it from standard input (one line; not with `sh -s`, whose
#                                standard input is this script)
#                                or set FLEET_BOOTSTRAP_KEY (sudo --preserve-env=FLEET_BOOTSTRAP_KEY).
#                                May be left out when this device already has a key (re-install, upgrade)
#   --broker <url>               broker to use (default: the one this script came from); https://, or
#                                http:// to this machine only
#   --insecure-http              allow an http:// broker on another machine (or FLEET_INSECURE_HTTP=1):
#                                the bootstrap key and the package travel unencrypted
#   --format deb|tar             force the package format
#   --root <dir>                 install below <dir> instead of / and start nothing (for tests and
#                                image builds; DESTDIR in the environment does the same)
set -eu
# Read from a pipe (curl … | sh -s): every command below takes its input from /dev/null, so that none
# swallows the rest of this script.

BROKER='__FLEET_BROKER_URL__'
SERVED_BY='__FLEET_BROKER_URL__'
VERSION='__FLEET_AGENT_VERSION__'
# The SHA-256 of each package the broker serves, "<sha256>  <file>" per line, and its public signing
# key: written in by the broker that served this script.
PACKAGE_SHA256S='__FLEET_PACKAGE_SHA256S__'
BROKER_KEY='__FLEET_BROKER_KEY__'
KEY="${FLEET_BOOTSTRAP_KEY:-}"
KEY_FILE_ARG=''
KEY_STDIN=''
INSECURE=''
case "${FLEET_INSECURE_HTTP:-}" in 1 | true) INSECURE=1 ;; esac
FORMAT=''
ROOT="${DESTDIR:-}"

say() { printf 'fleet-agent install: %s\n' "$*" >&2; }
die() {
  say "$*"
  exit 1
}
need_value() { [ "$#" -ge 2 ] || die "$1 needs a value"; }

while [ "$#" -gt 0 ]; do
  case "$1" in
    --bootstrap-key | --bootstrap-key=*)
      die "the bootstrap key is not taken from the command line (sudo logs it, ps shows it): use --bootstrap-key-file <file>, --bootstrap-key-stdin or FLEET_BOOTSTRAP_KEY" ;;
    --bootstrap-key-file) need_value "$@"; KEY_FILE_ARG=$2; shift 2 ;;
    --bootstrap-key-file=*) KEY_FILE_ARG=${1#*=}; shift ;;
    --bootstrap-key-stdin) KEY_STDIN=1; shift ;;
    --insecure-http) INSECURE=1; shift ;;
    --broker) need_value "$@"; BROKER=$2; shift 2 ;;
    --broker=*) BROKER=${1#*=}; shift ;;
    --format) need_value "$@"; FORMAT=$2; shift 2 ;;
    --format=*) FORMAT=${1#*=}; shift ;;
    --root) need_value "$@"; ROOT=$2; shift 2 ;;
    --root=*) ROOT=${1#*=}; shift ;;
    -h | --help)
      echo 'usage: install.sh [--bootstrap-key-file <file> | --bootstrap-key-stdin] [--broker <url>] [--insecure-http] [--format deb|tar] [--root <dir>]'
      exit 0
      ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
set --
if [ -n "$KEY_FILE_ARG" ]; then
  [ -r "$KEY_FILE_ARG" ] || die "cannot read the bootstrap key file $KEY_FILE_ARG"
  KEY=$(head -n 1 "$KEY_FILE_ARG" </dev/null | tr -d '\r')
  [ -n "$KEY" ] || die "the bootstrap key file $KEY_FILE_ARG is empty"
elif [ -n "$KEY_STDIN" ]; then
  # Run as `sh -s`, standard input is this script: its next line is no key.
  [ -f "$0" ] || die "--bootstrap-key-stdin needs the script saved to a file (sh fleet-install.sh …): with sh -s its standard input is the script"
  IFS= read -r KEY || [ -n "$KEY" ] || die "no bootstrap key on standard input"
  KEY=$(printf '%s' "$KEY" | tr -d '\r')
fi

# ---- checks, before anything is changed ----
case "$BROKER" in
  http://?* | https://?*) ;;
  *) die "give the broker URL with --broker https://broker.example.com" ;;
esac
case "$BROKER" in
  *[!][A-Za-z0-9._~:/?#@%+=,-]*) die "the broker URL has unexpected characters" ;;
esac
BROKER=${BROKER%/}
# Plain http only to this machine (127.0.0.0/8, ::1, localhost), or when asked for explicitly.
case "$BROKER" in
  http://*)
    HOSTPORT=${BROKER#http://}
    HOSTPORT=${HOSTPORT%%/*}
    LOOPBACK=''
    case "$HOSTPORT" in
      '[::1]' | '[::1]:'*) LOOPBACK=1 ;;
      *)
        case "${HOSTPORT%%:*}" in
          localhost) LOOPBACK=1 ;;
          127.*) case "${HOSTPORT%%:*}" in *[!0-9.]*) ;; *) LOOPBACK=1 ;; esac ;;
        esac
        ;;
    esac
    if [ -z "$LOOPBACK" ]; then
      [ -n "$INSECURE" ] || die "refusing the plain http broker $BROKER: the bootstrap key and the package would travel unencrypted and unauthenticated. Use https://, or give --insecure-http (FLEET_INSECURE_HTTP=1) to accept that risk"
      say "WARNING: --insecure-http: talking to $BROKER over plain http; anyone on the path can read the bootstrap key and pose as the broker"
    fi
    ;;
esac
case "$KEY" in
  *[!A-Za-z0-9._~+/=-]*) die "the bootstrap key has unexpected characters" ;;
esac
[ "${#KEY}" -le 256 ] || die "the bootstrap key is too long"
case "$FORMAT" in
  '' | deb | tar) ;;
  *) die "--format is deb or tar" ;;
esac
if [ -n "$ROOT" ]; then
  case "$ROOT" in
    /*) ;;
    *) ROOT="$(pwd)/$ROOT" ;;
  esac
  ROOT=${ROOT%/}
  [ -d "$ROOT" ] || die "--root $ROOT is not a directory"
elif [ "$(id -u)" != 0 ]; then
  die "run as root: curl -fsSL $BROKER/install.sh | sudo sh -s -- --bootstrap-key <key>"
fi

[ "$(uname -s)" = Linux ] || die "the agent runs on Linux; this is $(uname -s)"
case "$(uname -m)" in
  x86_64 | amd64) ARCH=amd64 ;;
  aarch64 | arm64) ARCH=arm64 ;;
  armv7* | armv8l | armhf) ARCH=armhf ;;
  *) die "no agent build for the $(uname -m) architecture" ;;
esac

command -v node >/dev/null 2>&1 || die "the agent needs Node.js 20 or later (package nodejs): install it first"
NODE_MAJOR=$(node -p 'process.versions.node.split(".")[0]' </dev/null 2>/dev/null || echo 0)
[ "$NODE_MAJOR" -ge 20 ] 2>/dev/null || die "the agent needs Node.js 20 or later; this node is $(node --version 2>/dev/null || echo unknown)"

if [ -z "$FORMAT" ]; then
  FORMAT=tar
  if [ -z "$ROOT" ] && command -v dpkg >/dev/null 2>&1 &&
    [ "$(dpkg-query -W -f='${Status}' nodejs </dev/null 2>/dev/null || true)" = "install ok installed" ]; then
    FORMAT=deb
  fi
fi
if [ "$FORMAT" = deb ]; then
  FILE="fleet-agent_${VERSION}_${ARCH}.deb"
else
  FILE="fleet-agent-${VERSION}-linux-${ARCH}.tar.gz"
fi

CONF_DIR="$ROOT/etc/fleet-agent"
STATE_DIR="$ROOT/var/lib/fleet-agent"
KEY_FILE="$CONF_DIR/bootstrap-key"
if [ -z "$KEY" ] && [ ! -s "$KEY_FILE" ]; then
  die "give the bootstrap key with --bootstrap-key-file <file> or --bootstrap-key-stdin (the console's Bootstrap keys screen shows the line)"
fi

command -v sha256sum >/dev/null 2>&1 || die "needs sha256sum (coreutils) to check the package"
EXPECTED=''
NL='
'
OLD_IFS=$IFS
IFS=$NL
set -f
for line in $PACKAGE_SHA256S; do
  case "$line" in
    *"  $FILE") EXPECTED=${line%%  *} ;;
  esac
done
set +f
IFS=$OLD_IFS
case "$EXPECTED" in
  '' | *[!0-9a-f]*) die "the broker lists no digest for $FILE: it is not built on this broker (or this script was altered)" ;;
esac
[ "${#EXPECTED}" -eq 64 ] || die "the broker's digest for $FILE is malformed"

# ---- download ----
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT INT TERM
say "downloading $BROKER/install/$FILE"
if command -v curl >/dev/null 2>&1; then
  curl -fsSL -o "$TMP/$FILE" "$BROKER/install/$FILE" </dev/null || die "could not download $BROKER/install/$FILE"
elif command -v wget >/dev/null 2>&1; then
  wget -q -O "$TMP/$FILE" "$BROKER/install/$FILE" </dev/null || die "could not download $BROKER/install/$FILE"
else
  die "needs curl or wget"
fi
GOT=$(sha256sum "$TMP/$FILE" </dev/null | cut -d ' ' -f 1)
[ "$GOT" = "$EXPECTED" ] || die "the downloaded $FILE does not match the broker's digest (sha256 $GOT, expected $EXPECTED): altered on the way? Nothing was installed"
say "checked $FILE: sha256 $GOT"

# ---- configuration and key (root only) ----
umask 077
mkdir -p "$CONF_DIR" "$STATE_DIR"
chmod 0700 "$CONF_DIR" "$STATE_DIR"
if [ -n "$KEY" ]; then
  # printf is a shell builtin: the key is written without appearing in any command line.
  printf '%s\n' "$KEY" >"$KEY_FILE.new"
  chmod 0600 "$KEY_FILE.new"
  mv -f "$KEY_FILE.new" "$KEY_FILE"
fi
INSECURE_JSON=''
[ -z "$INSECURE" ] || case "$BROKER" in http://*) INSECURE_JSON=',\n  "insecure_http": true' ;; esac
printf '{\n  "broker": "%s",\n  "bootstrap_key_file": "/etc/fleet-agent/bootstrap-key",\n  "state_dir": "/var/lib/fleet-agent"'"$INSECURE_JSON"'\n}\n' "$BROKER" >"$CONF_DIR/config.json.new"
chmod 0600 "$CONF_DIR/config.json.new"
mv -f "$CONF_DIR/config.json.new" "$CONF_DIR/config.json"
# The broker's signing key, from the same channel as this script: the agent trusts only this broker.
# A key pinned already (re-install, upgrade) is kept: the agent refuses a broker that cannot prove it.
# Another broker given with --broker: its key is pinned at enrolment instead.
if [ "$BROKER" = "${SERVED_BY%/}" ] && [ ! -s "$STATE_DIR/broker-key.pem" ]; then
  printf '%s\n' "$BROKER_KEY" >"$STATE_DIR/broker-key.pem.new"
  chmod 0600 "$STATE_DIR/broker-key.pem.new"
  mv -f "$STATE_DIR/broker-key.pem.new" "$STATE_DIR/broker-key.pem"
fi
umask 022

# ---- package ----
if [ "$FORMAT" = deb ]; then
  if [ -n "$ROOT" ]; then
    dpkg-deb -x "$TMP/$FILE" "$ROOT/"
  else
    dpkg -i "$TMP/$FILE" </dev/null || die "dpkg could not install $FILE (is the nodejs package >= 20?)"
  fi
else
  rm -rf "$ROOT/usr/lib/fleet-agent"
  tar -xzf "$TMP/$FILE" -C "$ROOT/"
fi
say "installed fleet-agent $VERSION ($FORMAT) for $BROKER"

# ---- service ----
if [ -n "$ROOT" ]; then
  say "installed below $ROOT: nothing started"
elif [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
  systemctl daemon-reload </dev/null
  systemctl enable fleet-agent.service </dev/null >/dev/null 2>&1
  systemctl restart fleet-agent.service </dev/null
  say "started: follow it with journalctl -u fleet-agent -f (device id and key fingerprint to approve)"
else
  say "no systemd here: start the agent with your init system as root: /usr/bin/fleet-agent --config /etc/fleet-agent/config.json"
fi
