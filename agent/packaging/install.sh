#!/bin/sh
# Installs the Fleet edge agent on this device and enrols it with the broker that served this script:
#
#   curl -fsSL https://<broker>/install.sh | sudo sh -s -- --bootstrap-key <key>
#
# It picks the .deb (Debian-like systems whose nodejs >= 20 is a Debian package) or the tarball (any
# other Linux with node >= 20 on the PATH), downloads it from the same broker (GET /install/<file>),
# installs it, writes the broker URL into /etc/fleet-agent/config.json and the bootstrap key into
# /etc/fleet-agent/bootstrap-key (root only, 0600: the running agent reads it from there, so the key
# stays out of its command line), then enables and starts the fleet-agent systemd service.
#
# Options:
#   --bootstrap-key <key>   key to enrol with (from the console's Bootstrap keys screen); may be left
#                           out when this device already has one (re-install, upgrade)
#   --broker <url>          broker to use (default: the one this script came from)
#   --format deb|tar        force the package format
#   --root <dir>            install below <dir> instead of / and start nothing (for tests and image
#                           builds; DESTDIR in the environment does the same)
set -eu
# Read from a pipe (curl … | sh -s): every command below takes its input from /dev/null, so that none
# swallows the rest of this script.

BROKER='__FLEET_BROKER_URL__'
VERSION='__FLEET_AGENT_VERSION__'
KEY=''
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
    --bootstrap-key) need_value "$@"; KEY=$2; shift 2 ;;
    --bootstrap-key=*) KEY=${1#*=}; shift ;;
    --broker) need_value "$@"; BROKER=$2; shift 2 ;;
    --broker=*) BROKER=${1#*=}; shift ;;
    --format) need_value "$@"; FORMAT=$2; shift 2 ;;
    --format=*) FORMAT=${1#*=}; shift ;;
    --root) need_value "$@"; ROOT=$2; shift 2 ;;
    --root=*) ROOT=${1#*=}; shift ;;
    -h | --help)
      echo 'usage: install.sh --bootstrap-key <key> [--broker <url>] [--format deb|tar] [--root <dir>]'
      exit 0
      ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
# The key is not needed in this shell's arguments any longer.
set --

# ---- checks, before anything is changed ----
case "$BROKER" in
  http://?* | https://?*) ;;
  *) die "give the broker URL with --broker https://broker.example.com" ;;
esac
case "$BROKER" in
  *[!][A-Za-z0-9._~:/?#@%+=,-]*) die "the broker URL has unexpected characters" ;;
esac
BROKER=${BROKER%/}
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
  die "give --bootstrap-key <key> (the console's Bootstrap keys screen shows this line with a key)"
fi

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
printf '{\n  "broker": "%s",\n  "bootstrap_key_file": "/etc/fleet-agent/bootstrap-key",\n  "state_dir": "/var/lib/fleet-agent"\n}\n' "$BROKER" >"$CONF_DIR/config.json.new"
chmod 0600 "$CONF_DIR/config.json.new"
mv -f "$CONF_DIR/config.json.new" "$CONF_DIR/config.json"
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
