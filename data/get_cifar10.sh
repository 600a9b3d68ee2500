#!/usr/bin/env bash
# Puts CIFAR-10 where the trainer finds it: unpacks a given archive, or downloads the official
# binary release (md5-checked). Usage: get_cifar10.sh [DEST] [ARCHIVE]
set -euo pipefail

URL="https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
MD5="c32a1d4ab5d03f1284b67883e8d87530"
BIN_FILES="data_batch_1.bin data_batch_2.bin data_batch_3.bin data_batch_4.bin data_batch_5.bin test_batch.bin"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${1:-$repo_root/data/cifar10}"
ARCHIVE="${2:-}"

die() { echo "get_cifar10.sh: error: $*" >&2; exit 1; }
say() { echo "get_cifar10.sh: $*"; }

case "${1:-}" in
  -h|--help)
    echo "usage: $0 [DEST] [ARCHIVE]"
    echo "  DEST     where to put the data (default: $repo_root/data/cifar10)"
    echo "  ARCHIVE  a local .tar.gz to unpack (cifar10-jpeg.tar.gz or cifar-10-binary.tar.gz);"
    echo "           without it, downloads $URL and checks its md5"
    exit 0 ;;
esac

# Prints where a usable layout is (the same places load_cifar10 looks); fails if none.
find_layout() {
  local d f ok
  for d in "$1" "$1/cifar-10-batches-bin"; do
    ok=1
    for f in $BIN_FILES; do [[ -f "$d/$f" ]] || ok=0; done
    if [[ $ok == 1 ]]; then echo "binary batches in $d"; return 0; fi
  done
  for d in "$1" "$1/cifar10-jpeg"; do
    if [[ -d "$d/train" && -d "$d/test" ]]; then echo "image folders in $d"; return 0; fi
  done
  return 1
}

# Checks what was unpacked ($1; $2 names it in errors), so a wrong or damaged archive fails
# here rather than in training.
verify() {
  local d f size n_train n_test
  for d in "$1" "$1/cifar-10-batches-bin"; do
    [[ -f "$d/test_batch.bin" ]] || continue
    for f in $BIN_FILES; do
      [[ -f "$d/$f" ]] || die "$2 lacks $f"
      size=$(wc -c < "$d/$f")
      [[ $size -eq 30730000 ]] || die "$f from $2 has $size bytes, expected 30730000"
    done
    say "ok: 6 binary batches in $d"
    return 0
  done
  for d in "$1" "$1/cifar10-jpeg"; do
    [[ -d "$d/train" && -d "$d/test" ]] || continue
    n_train=$(find "$d/train" -type f | wc -l)
    n_test=$(find "$d/test" -type f | wc -l)
    say "ok: image folders in $d ($n_train train, $n_test test images; CIFAR-10 has 50000 and 10000)"
    return 0
  done
  die "$2 holds no CIFAR-10 layout (expected cifar-10-batches-bin/*.bin or cifar10-jpeg/{train,test}/)"
}

if where=$(find_layout "$DEST"); then
  say "CIFAR-10 already present ($where); nothing to do"
  exit 0
fi

[[ -z "$ARCHIVE" || -f "$ARCHIVE" ]] || die "archive $ARCHIVE not found"
mkdir -p "$DEST" || die "cannot create $DEST"
DEST="$(cd "$DEST" && pwd)"
# Unpack into a scratch folder inside DEST, then move into place: an interrupted run never
# leaves a half-unpacked tree that looks complete.
partial="$DEST/.partial.$$"
download=""
cleanup() { rm -rf "$partial"; [[ -n "$download" ]] && rm -f "$download"; return 0; }
trap cleanup EXIT

if [[ -z "$ARCHIVE" ]]; then
  download="$DEST/cifar-10-binary.tar.gz.part"
  say "downloading $URL"
  if command -v curl > /dev/null; then
    curl -fL --retry 3 -o "$download" "$URL" || die "download failed (no internet? pass a local ARCHIVE instead)"
  elif command -v wget > /dev/null; then
    wget -O "$download" "$URL" || die "download failed (no internet? pass a local ARCHIVE instead)"
  else
    die "neither curl nor wget is installed; download $URL yourself and pass it as ARCHIVE"
  fi
  if command -v md5sum > /dev/null; then
    sum=$(md5sum "$download" | cut -d' ' -f1)
  elif command -v md5 > /dev/null; then
    sum=$(md5 -q "$download")
  else
    die "no md5sum or md5 to check the download with"
  fi
  [[ "$sum" == "$MD5" ]] || die "md5 of the download is $sum, expected $MD5 (corrupt or changed download)"
  say "md5 ok"
  ARCHIVE="$download"
fi

[[ -f "$ARCHIVE" ]] || die "archive $ARCHIVE not found"
say "unpacking $ARCHIVE into $DEST"
mkdir -p "$partial"
tar -xf "$ARCHIVE" -C "$partial" --no-same-owner || die "cannot unpack $ARCHIVE (not a tar archive, or damaged)"
verify "$partial" "$ARCHIVE" > /dev/null
for entry in "$partial"/* "$partial"/.[!.]*; do
  [[ -e "$entry" ]] || continue
  name=$(basename "$entry")
  [[ ! -e "$DEST/$name" ]] || die "$DEST/$name already exists but is not a complete CIFAR-10; remove it and rerun"
  mv "$entry" "$DEST/$name"
done
verify "$DEST" "$DEST"
say "done: $(find_layout "$DEST")"
