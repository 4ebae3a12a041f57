#!/usr/bin/env bash
# The C++ package works as a user meets it: install BUILD into a scratch prefix, build
# examples/cpp against it with find_package(stoker), run it on a dataset the CLI packs, and
# check that a damaged chunk is reported, not read.
#
#   bash examples/cpp/test_install.sh BUILD_DIR STOKER_CLI
set -euo pipefail
build=$1
cli=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" >/dev/null
test -f "$work/prefix/include/stoker/dataset.h"
# The public headers include only each other and the standard library.
if grep -h '#include "' "$work/prefix/include/stoker/"*.h | grep -v '"stoker/'; then
  echo "a public header includes an internal one" >&2
  exit 1
fi
cmake -S "$here" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null

mkdir -p "$work/tree/cats" "$work/tree/dogs"
printf 'meow' >"$work/tree/cats/a.txt"
printf 'purr purr' >"$work/tree/cats/b.txt"
printf 'woof' >"$work/tree/dogs/c.txt"
"$cli" pack -q "$work/tree" "$work/ds"

out=$("$work/build/stoker_example" "$work/ds")
echo "$out"
grep -qx 'stoker 0.1.0' <<<"$out"
grep -q '^version 1: 3 files, 3 samples, 2 classes$' <<<"$out"
grep -qx 'cats/' <<<"$out"
grep -qx 'dogs/' <<<"$out"
grep -qx 'read 17 bytes, every file checked' <<<"$out"

# A flipped byte in a file's bytes: the example fails naming the damage instead of reading on.
info=$("$cli" stat --json "$work/ds" cats/b.txt)
offset=$(sed -n 's/.*"offset": \([0-9]*\).*/\1/p' <<<"$info")
chunk_id=$(sed -n 's/.*"chunk": "\([0-9a-f]*\)".*/\1/p' <<<"$info")
chunk=$(ls "$work/ds"/chunks/*"$chunk_id"* | head -1)
printf 'X' | dd of="$chunk" bs=1 seek="$offset" conv=notrunc status=none
if "$work/build/stoker_example" "$work/ds" >"$work/out" 2>"$work/err"; then
  echo "a damaged chunk was read without an error" >&2
  exit 1
fi
grep -q 'cats/b.txt' "$work/err" || { cat "$work/err" >&2; exit 1; }
echo "CppPackage: installed, found, built, read, and a damaged chunk refused"
