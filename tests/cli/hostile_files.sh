#!/usr/bin/env bash
# Files a hostile campaign gave the commands (issue 52), each refused with one line that names the
# file and its own reason: a damaged safetensors file given to `inspect` gets the safetensors
# reader's reason (the one `prepare-data --vae` gives), not "no such checkpoint folder"; an empty
# file is called empty; a picture too large to decode is refused for the same reason with and
# without a VAE; a FIFO or device where a folder goes is told to give a folder; a symbolic link
# loop in an image folder is named as one.
source "$(dirname "$0")/common.sh"
DATA=${DIT_DATA:-$(cd "$(dirname "$0")/../data" && pwd)}

# One line on stderr, a non-zero exit, and every expected phrase in it; $1 names the case.
refused() {
  local what=$1 expect=$2
  shift 2
  if "$@" > "$SCRATCH/out.txt" 2> "$SCRATCH/err.txt"; then fail "$what: was not refused"; fi
  [[ $(wc -l < "$SCRATCH/err.txt") -eq 1 ]] || fail "$what: expected one line on stderr: $(cat "$SCRATCH/err.txt")"
  grep -qF -- "$expect" "$SCRATCH/err.txt" || fail "$what: expected '$expect' in: $(cat "$SCRATCH/err.txt")"
  if grep -q "no such checkpoint folder\|is a text file\|filesystem error\|unknown image type" "$SCRATCH/err.txt"; then
    fail "$what: the wrong reason: $(cat "$SCRATCH/err.txt")"
  fi
}

# Damaged safetensors headers, written as the campaign wrote them.
/usr/bin/python3 - "$SCRATCH" <<'PY'
import struct, sys
d = sys.argv[1]
def st(name, length, header):
    open(f"{d}/{name}.safetensors", "wb").write(struct.pack("<Q", length) + header)
st("len63", 1 << 63, b"{}")                                   # a header length of 2^63
st("len64", (1 << 64) - 1, b"{}")                             # 2^64 - 1: all 0xFF bytes
st("notjson", 6, b"hello!")                                   # a header that is not JSON
st("notutf8", 9, b'{"\xff\xfe":{}}')                          # a key that is not UTF-8
deep = b'{"a":' + b"[" * 100000 + b"]" * 100000 + b"}"
st("deep", len(deep), deep)                                   # 100000-deep nesting
open(f"{d}/four.safetensors", "wb").write(b"\x02\x00\x00\x00")  # 4 bytes
open(f"{d}/empty.safetensors", "wb").close()                  # 0 bytes
PY
declare -A REASON=(
  [len63]="header length 9223372036854775808 bytes is over the format's"
  [len64]="header length 18446744073709551615 bytes is over the format's"
  [notjson]="the header does not start with '{'"
  [notutf8]="the safetensors header is not valid JSON at byte 2: byte 0xff inside a string is not valid UTF-8"
  [deep]="the safetensors header is not valid JSON at byte 13: nested deeper than 8 levels"
  [four]="4 bytes, shorter than a safetensors file's 8-byte header length"
)
mkdir -p "$SCRATCH/imgs/cat"
cp "$DATA/image_prep/gray_c.png" "$SCRATCH/imgs/cat/a.png"
for name in "${!REASON[@]}"; do
  f="$SCRATCH/$name.safetensors"
  refused "inspect $name" "$f: ${REASON[$name]}" "$DIT_MP" inspect "$f"
  refused "prepare-data --vae $name" "$f: ${REASON[$name]}" \
    "$DIT_MP" prepare-data images "$SCRATCH/imgs" --vae "$f" --size 16 --out "$SCRATCH/lat_$name.h5"
done
refused "inspect of an empty file" "empty.safetensors is an empty file (0 bytes), expected a checkpoint or a safetensors file" \
  "$DIT_MP" inspect "$SCRATCH/empty.safetensors"
refused "--vae of an empty file" "empty.safetensors is an empty file (0 bytes), expected a safetensors file" \
  "$DIT_MP" prepare-data images "$SCRATCH/imgs" --vae "$SCRATCH/empty.safetensors" --size 16 --out "$SCRATCH/e.h5"

# A PNG that declares 100000 x 100000 pixels (its chunks intact): one reason with and without --vae.
mkdir -p "$SCRATCH/big/cat"
/usr/bin/python3 - "$SCRATCH/big/cat/huge.png" <<'PY'
import struct, sys, zlib
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
ihdr = struct.pack(">IIBBBBB", 100000, 100000, 8, 0, 0, 0, 0)
open(sys.argv[1], "wb").write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
                              + chunk(b"IEND", b""))
PY
BIG="100000x100000 pixels, over PIL's decompression-bomb limit of 178956970"
refused "a huge PNG (pixels)" "huge.png" "$DIT_MP" prepare-data images "$SCRATCH/big" --size 16 --out "$SCRATCH/big.h5"
grep -qF "$BIG" "$SCRATCH/err.txt" || fail "a huge PNG (pixels): $(cat "$SCRATCH/err.txt")"
refused "a huge PNG (--vae)" "huge.png" "$DIT_MP" prepare-data images "$SCRATCH/big" --vae "$DATA/vae_tiny.safetensors" \
  --size 16 --out "$SCRATCH/big_lat.h5"
grep -qF "$BIG" "$SCRATCH/err.txt" || fail "a huge PNG (--vae): $(cat "$SCRATCH/err.txt")"

# A device or a FIFO where a folder goes: the advice names a folder.
mkfifo "$SCRATCH/fifo"
T=(--dry-run --tp 1 --pp 1)
refused "--run-dir /dev/null" "run.dir /dev/null is a FIFO, device or socket, expected a run folder: give a folder" \
  "$DIT_MP" "${T[@]}" --run-dir /dev/null
refused "--checkpoint-dir FIFO" "is a FIFO, device or socket, expected a checkpoint root (step folders and latest): give a folder" \
  "$DIT_MP" "${T[@]}" --run-dir "$SCRATCH/run" --checkpoint-dir "$SCRATCH/fifo"
refused "--data FIFO" "is a FIFO, device or socket, expected a dataset: give a regular file" \
  "$DIT_MP" "${T[@]}" --run-dir "$SCRATCH/run" --data "$SCRATCH/fifo"

# A symbolic link loop in an image folder, as a class and as a picture: named as a loop.
mkdir -p "$SCRATCH/loops/cat"
cp "$DATA/image_prep/gray_c.png" "$SCRATCH/loops/cat/a.png"
ln -s "$SCRATCH/loops/cat/b.png" "$SCRATCH/loops/cat/b.png"
refused "a looping picture" "loops/cat/b.png: a symbolic link loop" \
  "$DIT_MP" prepare-data images "$SCRATCH/loops" --size 16 --out "$SCRATCH/loops.h5"
rm "$SCRATCH/loops/cat/b.png"
ln -s "$SCRATCH/loops/dog2" "$SCRATCH/loops/dog1"
ln -s "$SCRATCH/loops/dog1" "$SCRATCH/loops/dog2"
refused "a looping class folder" ": a symbolic link loop" \
  "$DIT_MP" prepare-data images "$SCRATCH/loops" --size 16 --out "$SCRATCH/loops.h5"
grep -q "loops/dog[12]: a symbolic link loop" "$SCRATCH/err.txt" || fail "the loop is not named: $(cat "$SCRATCH/err.txt")"

# A picture's name that is no picture file (a dangling symbolic link, a FIFO) is never left out
# unsaid (issue 53): refused naming it (pixels; --vae under --bad-files fail), no hang; under
# --bad-files skip, left out and listed as skipped.
mkdir -p "$SCRATCH/odd/cat"
cp "$DATA/image_prep/gray_c.png" "$SCRATCH/odd/cat/a.png"
ln -s "$SCRATCH/odd/cat/gone.png" "$SCRATCH/odd/cat/x.png"
refused "a dangling picture link" "odd/cat/x.png: a symbolic link to $SCRATCH/odd/cat/gone.png, which does not exist" \
  timeout 60 "$DIT_MP" prepare-data images "$SCRATCH/odd" --size 16 --out "$SCRATCH/odd.h5"
refused "a dangling picture link (--vae)" "odd/cat/x.png: a symbolic link to $SCRATCH/odd/cat/gone.png, which does not exist (--bad-files fail" \
  timeout 60 "$DIT_MP" prepare-data images "$SCRATCH/odd" --vae "$DATA/vae_tiny.safetensors" --size 16 --out "$SCRATCH/odd_lat.h5"
rm "$SCRATCH/odd/cat/x.png" && mkfifo "$SCRATCH/odd/cat/y.png"
refused "a FIFO picture" "odd/cat/y.png: a FIFO, not a regular file" \
  timeout 60 "$DIT_MP" prepare-data images "$SCRATCH/odd" --size 16 --out "$SCRATCH/odd.h5"
refused "a FIFO picture (--vae)" "odd/cat/y.png: a FIFO, not a regular file" \
  timeout 60 "$DIT_MP" prepare-data images "$SCRATCH/odd" --vae "$DATA/vae_tiny.safetensors" --size 16 --out "$SCRATCH/odd_lat.h5"
timeout 60 "$DIT_MP" prepare-data images "$SCRATCH/odd" --vae "$DATA/vae_tiny.safetensors" --size 16 --bad-files skip \
  --out "$SCRATCH/odd_skip.h5" > "$SCRATCH/skip.txt" 2>&1 || { cat "$SCRATCH/skip.txt"; fail "--bad-files skip refused a FIFO"; }
grep -q "^skipped .*odd/cat/y.png: a FIFO, not a regular file" "$SCRATCH/skip.txt" || fail "the skipped FIFO is not listed: $(cat "$SCRATCH/skip.txt")"
echo ok
