#!/usr/bin/env bash
# Creates the virtual environments of the peers that bench/run_decode.py measures, each under
# $STOKER_BENCH_CACHE (default /var/tmp/stoker-bench). Idempotent: a venv whose marker file exists
# is left alone, so re-running only retries what failed. Each step is independent; a peer that
# cannot be installed is reported and skipped (run_decode.py records why when it fails to start).
#
#   bash bench/setup_peers.sh [tv] [simd] [dali] [ffcv] [streaming] [ray]   (default: the first four)
#
#   venv-tv    torch 2.14.1 + torchvision 0.29.1 + Pillow (the reference: ImageFolder + DataLoader)
#   venv-simd  the same with Pillow replaced by pillow-simd (compiled from source with AVX2)
#   venv-dali  nvidia-dali-cuda120 (its CPU-only mode) + torch for the output tensors
#   venv-ffcv  ffcv 1.0.2 (needs Debian's libopencv-dev, libturbojpeg0-dev, pkg-config)
#   venv-streaming  mosaicml-streaming + litdata (bench/run_columns.py); streaming imports
#              torchvision, hence the same torch + torchvision pair
#   venv-ray   ray[data,train] 2.60.0 + torch 2.13.0 (a CPU build) + Pillow + numpy: the feeders
#              benchmark's peer, bench/feeders_peers/ray_data_pass.py (Ray Data reading the JPEGs,
#              decoding and augmenting in map_batches with PIL, iter_torch_batches to the trainer).
#              No torchvision (it does not import beside torch 2.13.0); the transform is PIL.
#              The step refuses a torch that would pull CUDA libraries (nvidia-* wheels) and
#              checks torch.version.cuda is None. Not in the default set: `... setup_peers.sh ray`.
#
# torchvision does not import beside the project's torch 2.13.0, which is why these do not use
# /work/main/.venv. torch 2.14.1 is a CUDA build (~5.5 GB installed); it runs on the CPU.
set -u
CACHE=${STOKER_BENCH_CACHE:-/var/tmp/stoker-bench}
PY=${PYTHON:-python3}
TORCH="torch==2.14.1"
TV="torchvision==0.29.1"
mkdir -p "$CACHE"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tv simd dali ffcv)
failed=()

log() { echo "setup_peers: $*" >&2; }

# make_venv NAME: creates $CACHE/NAME unless it exists; returns 0 if it is already complete.
make_venv() {
  local v=$CACHE/$1
  if [ -f "$v/.stoker-ready" ]; then log "$1 ready"; return 0; fi
  [ -x "$v/bin/python" ] || "$PY" -m venv "$v" || return 2
  "$v/bin/pip" install -q --upgrade pip wheel setuptools >/dev/null || true
  return 1
}

setup_tv() {
  make_venv venv-tv; case $? in 0) return 0;; 2) return 1;; esac
  local v=$CACHE/venv-tv
  "$v/bin/pip" install "$TORCH" "$TV" pillow numpy || return 1
  "$v/bin/python" -c "import torchvision, PIL; print('venv-tv:', torchvision.__version__, PIL.__version__)" \
    && touch "$v/.stoker-ready"
}

setup_streaming() {
  make_venv venv-streaming; case $? in 0) return 0;; 2) return 1;; esac
  local v=$CACHE/venv-streaming
  "$v/bin/pip" install "$TORCH" "$TV" mosaicml-streaming litdata numpy || return 1
  "$v/bin/python" -c "import streaming, litdata; print('venv-streaming:', streaming.__version__, litdata.__version__)" \
    && touch "$v/.stoker-ready"
}

setup_simd() {
  make_venv venv-simd; case $? in 0) return 0;; 2) return 1;; esac
  local v=$CACHE/venv-simd
  # pillow-simd builds from source: needs libjpeg-dev and zlib1g-dev (Debian), and AVX2 enabled.
  if ! dpkg -s libjpeg-dev zlib1g-dev >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq libjpeg-dev zlib1g-dev || return 1
  fi
  "$v/bin/pip" install "$TORCH" "$TV" numpy || return 1
  "$v/bin/pip" uninstall -y pillow
  CC="cc -mavx2" "$v/bin/pip" install --no-cache-dir --no-binary pillow-simd pillow-simd || return 1
  # torchvision's metadata requires "pillow"; the distribution pillow-simd provides module PIL.
  "$v/bin/python" -c "import PIL, torchvision; assert 'post' in PIL.__version__, PIL.__version__; print('venv-simd:', PIL.__version__)" \
    && touch "$v/.stoker-ready"
}

setup_dali() {
  make_venv venv-dali; case $? in 0) return 0;; 2) return 1;; esac
  local v=$CACHE/venv-dali
  "$v/bin/pip" install "$TORCH" numpy || return 1
  local ok=1
  for pkg in nvidia-dali-cuda120 nvidia-dali-cuda130 nvidia-dali-cuda110; do
    if "$v/bin/pip" install "$pkg"; then ok=0; break; fi
  done
  [ $ok -eq 0 ] || return 1
  "$v/bin/python" -c "import nvidia.dali as d; print('venv-dali:', d.__version__)" \
    && touch "$v/.stoker-ready"
}

setup_ffcv() {
  make_venv venv-ffcv; case $? in 0) return 0;; 2) return 1;; esac
  local v=$CACHE/venv-ffcv
  if ! dpkg -s libopencv-dev libturbojpeg0-dev pkg-config >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq libopencv-dev libturbojpeg0-dev pkg-config || return 1
  fi
  "$v/bin/pip" install "$TORCH" "$TV" numpy numba opencv-python-headless || return 1
  # ffcv's setup.py imports numpy/torch-free build helpers and finds opencv/turbojpeg through
  # pkg-config; build isolation would hide the numpy it needs, so build in the venv itself.
  "$v/bin/pip" install --no-build-isolation ffcv || return 1
  "$v/bin/python" -c "import ffcv; print('venv-ffcv: ffcv', ffcv.__version__ if hasattr(ffcv, '__version__') else '?')" \
    && touch "$v/.stoker-ready"
}

# The feeders benchmark's peer (issue 39): Ray Data, the PyTorch user's way today to use other
# machines' CPUs for decode + augmentation. torch==2.13.0 must resolve to a CPU build (this
# machine's pip finds 2.13.0+cpu in its local wheel directory; PyPI's own 2.13.0 wheel for Linux
# is the CUDA one, which pulls ~3 GB of nvidia-* wheels): a dry run refuses that before
# downloading anything.
# iter_torch_batches imports ray.train (pydantic): hence the train extra.
RAY="ray[data,train]==2.60.0"
setup_ray() {
  make_venv venv-ray; case $? in 0) return 0;; 2) return 1;; esac
  local v=$CACHE/venv-ray report=$CACHE/venv-ray/install-report.json
  "$v/bin/pip" install -q --dry-run --report "$report" "$RAY" "torch==2.13.0" pillow numpy || return 1
  "$v/bin/python" - "$report" <<'PYEOF' || return 1
import json, sys
names = {i["metadata"]["name"].lower(): i["metadata"]["version"]
         for i in json.load(open(sys.argv[1]))["install"]}
cuda = sorted(n for n in names if n.startswith("nvidia-"))
if cuda:
    sys.exit(f"venv-ray: pip would install a CUDA torch ({names.get('torch')}, with {cuda[:3]}...): "
             "put a CPU wheel of torch 2.13.0 where pip finds it (pip's find-links) and retry")
print("venv-ray: will install torch", names.get("torch", "(present)"), "ray", names.get("ray", "(present)"))
PYEOF
  "$v/bin/pip" install "$RAY" "torch==2.13.0" pillow numpy || return 1
  "$v/bin/python" -c "
import ray, ray.data, ray.train.torch, torch, PIL, numpy
assert torch.version.cuda is None, 'CUDA torch: ' + torch.__version__
print('venv-ray: ray', ray.__version__, 'torch', torch.__version__, 'PIL', PIL.__version__, 'numpy', numpy.__version__)" \
    && touch "$v/.stoker-ready"
}

# bench/run_cache.py's shared-cache baseline: Debian's redis-server (its service is not started
# here; the benchmark runs its own redis-server inside a network namespace) and redis-py (with the
# hiredis parser) + crc32c in the project's venv (/work/main/.venv, or $STOKER_VENV). Not in the
# default set: `bash bench/setup_peers.sh redis`.
setup_redis() {
  local v=${STOKER_VENV:-$(cd "$(dirname "$0")/.." && pwd)/.venv}
  command -v redis-server >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq redis-server; } || return 1
  "$v/bin/pip" install -q "redis==8.1.0" "hiredis==3.5.0" "crc32c==2.9.post0" || return 1
  "$v/bin/python" -c "import redis, hiredis, crc32c; print('redis-py', redis.__version__, 'hiredis', hiredis.__version__)"
}

# bench/run_s3.py's streaming-format peers: webdataset and MosaicML Streaming (+ boto3 for the
# per-file GET reader and the uploads) in their own venv, venv-s3peers. Streaming needs torch;
# torch 2.14.1 as in venv-tv. Not in the default set: `bash bench/setup_peers.sh s3peers`.
setup_s3peers() {
  make_venv venv-s3peers; case $? in 0) return 0;; 2) return 1;; esac
  local v=$CACHE/venv-s3peers
  "$v/bin/pip" install "$TORCH" "mosaicml-streaming==0.13.0" "webdataset==1.0.2" \
    "boto3==1.44.5" "crc32c==2.9.post0" numpy || return 1
  "$v/bin/python" -c "import streaming, webdataset, boto3; print('venv-s3peers: streaming', streaming.__version__, 'webdataset', webdataset.__version__)" \
    && touch "$v/.stoker-ready"
}

# bench/run_mount.py's network-file-system baseline (case remote-sshfs): Debian's sshfs (a FUSE
# SFTP client) and openssh-server (the benchmark runs its own sshd in a network namespace; the
# service is not started). This machine's kernel has no NFS client, so sshfs stands in for NFS.
# Not in the default set: `bash bench/setup_peers.sh sshfs`.
setup_sshfs() {
  { command -v sshfs && test -x /usr/sbin/sshd; } >/dev/null 2>&1 && return 0
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends sshfs openssh-server openssh-client || return 1
  sshfs --version | head -1
}

for s in "${steps[@]}"; do
  log "== $s"
  if ! "setup_$s"; then log "$s FAILED"; failed+=("$s"); fi
done
if [ ${#failed[@]} -gt 0 ]; then log "failed: ${failed[*]}"; exit 1; fi
log "all ready"
