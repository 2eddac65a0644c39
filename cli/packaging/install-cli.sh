#!/bin/sh
# Installs the fleet command-line client from the broker that served this script:
#
#   curl -fsSL __FLEET_BROKER_URL__/install-cli.sh | sh
#   curl -fsSL __FLEET_BROKER_URL__/install-cli.sh | sh -s -- --prefix /opt/fleet
#
# Into a prefix: ~/.local by default (/usr/local as root), --prefix DIR or PREFIX=DIR to choose.
# It writes <prefix>/bin/fleet and <prefix>/lib/fleet-cli/; it needs Node.js 20 or later. The
# tarball is checked against the SHA-256 the broker wrote into this script: anything else is refused
# and nothing is installed.
set -eu

BROKER_URL='__FLEET_BROKER_URL__'
TARBALL='__FLEET_CLI_TARBALL__'
SHA256='__FLEET_CLI_SHA256__'

say() { printf '%s\n' "$*" >&2; }
die() { say "install-cli: $*"; exit 1; }

prefix="${PREFIX:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; prefix="$2"; shift 2 ;;
    --prefix=*) prefix="${1#--prefix=}"; shift ;;
    -h|--help) say "usage: sh install-cli.sh [--prefix DIR]   (default ~/.local, /usr/local as root; or PREFIX=DIR)"; exit 0 ;;
    *) die "unknown option $1 (usage: sh install-cli.sh [--prefix DIR])" ;;
  esac
done
if [ -z "$prefix" ]; then
  if [ "$(id -u)" = 0 ]; then prefix=/usr/local; else prefix="${HOME:?HOME is not set}/.local"; fi
fi

case "$SHA256" in
  [0-9a-f]*) [ ${#SHA256} -eq 64 ] || die "this broker has no CLI build to install (npm run build:cli)" ;;
  *) die "this broker has no CLI build to install (npm run build:cli)" ;;
esac

command -v node >/dev/null 2>&1 || die "needs Node.js 20 or later (https://nodejs.org); node is not on PATH"
node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' ||
  die "needs Node.js 20 or later; this is $(node --version)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fleet-cli.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

if command -v curl >/dev/null 2>&1; then
  curl -fsSL "$BROKER_URL/install/$TARBALL" -o "$tmp/$TARBALL" || die "could not download $BROKER_URL/install/$TARBALL"
elif command -v wget >/dev/null 2>&1; then
  wget -q -O "$tmp/$TARBALL" "$BROKER_URL/install/$TARBALL" || die "could not download $BROKER_URL/install/$TARBALL"
else
  die "needs curl or wget"
fi

if command -v sha256sum >/dev/null 2>&1; then got=$(sha256sum "$tmp/$TARBALL" | cut -d' ' -f1)
elif command -v shasum >/dev/null 2>&1; then got=$(shasum -a 256 "$tmp/$TARBALL" | cut -d' ' -f1)
else got=$(openssl dgst -sha256 "$tmp/$TARBALL" | sed 's/.*= *//')
fi
[ "$got" = "$SHA256" ] || die "refused $TARBALL: its SHA-256 is $got, the broker announced $SHA256 (altered on the way?); nothing installed"

mkdir -p "$tmp/tree"
tar -xzf "$tmp/$TARBALL" -C "$tmp/tree"
[ -f "$tmp/tree/bin/fleet" ] && [ -f "$tmp/tree/lib/fleet-cli/fleet.mjs" ] || die "$TARBALL does not hold the fleet CLI"

mkdir -p "$prefix/bin" "$prefix/lib"
rm -rf "$prefix/lib/fleet-cli.new"
cp -R "$tmp/tree/lib/fleet-cli" "$prefix/lib/fleet-cli.new"
rm -rf "$prefix/lib/fleet-cli"
mv "$prefix/lib/fleet-cli.new" "$prefix/lib/fleet-cli"
cp "$tmp/tree/bin/fleet" "$prefix/bin/fleet.new"
chmod 755 "$prefix/bin/fleet.new"
mv -f "$prefix/bin/fleet.new" "$prefix/bin/fleet"

say "Installed fleet into $prefix/bin/fleet (from $BROKER_URL)."
case ":$PATH:" in
  *":$prefix/bin:"*) ;;
  *) say "$prefix/bin is not on your PATH: add it, e.g. export PATH=\"$prefix/bin:\$PATH\"" ;;
esac
say "Sign in: fleet login --url $BROKER_URL"
