#!/usr/bin/env bash
# The edge agent on ARM, proven under qemu-user: build (and cache) Debian bookworm root filesystems for arm64
# and armv7 (armhf) from Debian's packages, install fedplane in them, run `fedplane agent --check`, then a small
# cluster (control plane on the host, 3 agents chrooted into the ARM root filesystem) placing pods on the twin,
# and compare the policy's choices there with amd64's on the same recorded inputs.
#
# usage (as root): deploy/arm/check.sh [--json] [--arch arm64|armv7] [--pods N] [--agents N] [--cache DIR] [--image]
#   --json     print one JSON object on stdout (progress goes to stderr either way)
#   --arch     one architecture only (default: both)
#   --pods     pods per architecture (default 20); --agents: emulated agents per architecture (default 3)
#   --cache    where root filesystems and wheels are kept between runs (default /var/cache/fedplane-arm,
#              or $FEDPLANE_ARM_CACHE); delete it to rebuild from scratch
#   --image    also build the agent's container image for each arch (deploy/container/Containerfile) with podman
#              or buildah, tagged fedplane-agent:0.1.0-<arch>; without either engine it says how and goes on
# Needs: root (binfmt_misc, chroot, mount), Debian's apt (qemu-user-static, binfmt-support, mmdebstrap are
# installed if missing), PyPI (aarch64 wheels of the edge set), and `fedplane` on PATH (the host side runs the
# control plane with the interpreter of that executable). Everything emulated runs niced; the root filesystems
# take ~1 min to build, the wheels a few to download, the emulated cluster runs most of the time.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/../.." && pwd)
json=0; image=0; arches="arm64 armv7"; pods=20; agents=3; cache=${FEDPLANE_ARM_CACHE:-/var/cache/fedplane-arm}; suite=bookworm
while [ $# -gt 0 ]; do
  case "$1" in
    --json) json=1 ;;
    --arch) arches=${2:?--arch needs arm64 or armv7}; shift ;;
    --pods) pods=${2:?}; shift ;;
    --agents) agents=${2:?}; shift ;;
    --cache) cache=${2:?}; shift ;;
    --image) image=1 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac; shift
done
for a in $arches; do case "$a" in arm64|armv7) ;; *) echo "check.sh: --arch must be arm64 or armv7, got '$a'" >&2; exit 2 ;; esac; done
[ "$(id -u)" = 0 ] || { echo "check.sh: run as root (binfmt_misc, chroot and mounts need it)" >&2; exit 2; }
fedplane_bin=$(command -v fedplane) || { echo "check.sh: put fedplane on PATH (the host runs the control plane)" >&2; exit 2; }
py=$(head -1 "$fedplane_bin" | sed 's/^#! *//'); [ -x "$py" ] || py=python3
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"  # the host side runs this checkout's code, as the wheel holds
say() { echo "check.sh: $*" >&2; }
start=$(date +%s)

# 1. Emulation: qemu-user with binfmt_misc, the F flag so binaries inside a chroot find the interpreter.
if ! command -v mmdebstrap >/dev/null || [ ! -e /usr/lib/binfmt.d/qemu-aarch64.conf ]; then
  say "installing qemu-user-static binfmt-support mmdebstrap"
  apt-get -o DPkg::Lock::Timeout=900 update -qq && apt-get -o DPkg::Lock::Timeout=900 install -y -qq qemu-user-static binfmt-support mmdebstrap >&2
fi
mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
for q in aarch64 arm; do
  [ -e /proc/sys/fs/binfmt_misc/qemu-$q ] || cat /usr/lib/binfmt.d/qemu-$q.conf > /proc/sys/fs/binfmt_misc/register
  grep -q '^flags:.*F' /proc/sys/fs/binfmt_misc/qemu-$q || { say "qemu-$q is registered without the F flag; unregister it (echo -1 > /proc/sys/fs/binfmt_misc/qemu-$q)"; exit 1; }
done

# 2. Root filesystems from Debian's packages, cached; rebuilt when the package list changes. Packages are
#    extracted, not configured: their maintainer scripts would run emulated (dpkg-configuring bookworm's
#    python3 under qemu took over 40 min on a busy 2-core host; extracting takes ~20 s), and the only thing
#    they do that Python needs here is the BLAS/LAPACK alternatives, linked below.
#    armv7: onnxruntime has no armv7 wheel, nor numpy/grpcio on PyPI: the agent's dependencies come from Debian.
declare -A debarch=([arm64]=arm64 [armv7]=armhf)
declare -A packages=([arm64]=coreutils,python3,libstdc++6,libgcc-s1 [armv7]=coreutils,python3,python3-numpy,python3-msgpack,python3-nacl,python3-yaml,python3-xxhash,python3-bitarray)
mkdir -p "$cache"
rootfs() {
  local arch=$1 dir=$cache/$1 stamp="$suite ${debarch[$1]} extract ${packages[$1]}" lib
  if [ -f "$dir/.fedplane-rootfs" ] && [ "$(cat "$dir/.fedplane-rootfs")" = "$stamp" ]; then return; fi
  say "building the $arch root filesystem ($suite, ${debarch[$arch]}) in $dir"
  rm -rf "$dir.tmp"
  nice -n 10 mmdebstrap --quiet --variant=extract --architectures="${debarch[$arch]}" --include="${packages[$arch]}" \
    "$suite" "$dir.tmp" >&2
  for lib in "$dir.tmp"/usr/lib/*-linux-gnu*/blas/lib*.so.3 "$dir.tmp"/usr/lib/*-linux-gnu*/lapack/lib*.so.3; do
    [ -e "$lib" ] && ln -sfn "$(basename "$(dirname "$lib")")/$(basename "$lib")" "$(dirname "$(dirname "$lib")")/$(basename "$lib")"
  done
  mkdir -p "$dir.tmp/proc" "$dir.tmp/srv" "$dir.tmp/opt"
  echo "$stamp" > "$dir.tmp/.fedplane-rootfs"
  rm -rf "$dir"; mv "$dir.tmp" "$dir"
}

# 3. fedplane into /opt/fedplane (every run), its dependencies into /opt/fedplane-deps (cached by requirement set).
wheels=$cache/wheels; mkdir -p "$wheels"; rm -f "$wheels"/fedplane-*.whl
say "building the fedplane wheel"
src=$(mktemp -d); tar -C "$repo" --exclude=./.git --exclude=./build --exclude=./.venv --exclude='*.egg-info' -cf - . | tar -C "$src" -xf -
"$py" -m pip wheel -q --no-deps -w "$wheels" "$src" >&2; rm -rf "$src"  # from a clean copy: no stale build/ of the checkout
wheel=$(ls "$wheels"/fedplane-*.whl)
ls "$wheels"/pybloom_live-*.whl >/dev/null 2>&1 || "$py" -m pip wheel -q --no-deps -w "$wheels" pybloom-live >&2
install_fedplane() {
  local arch=$1 root=$cache/$1 reqs
  reqs=$("$py" -c 'import sys, zipfile, hashlib; z = zipfile.ZipFile(sys.argv[1]); m = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA")); print(hashlib.sha256("".join(sorted(l for l in z.read(m).decode().splitlines() if l.startswith("Requires-Dist:") and "extra ==" not in l)).encode()).hexdigest()[:16])' "$wheel")
  if [ "$(cat "$root/opt/.fedplane-deps" 2>/dev/null)" != "$reqs" ]; then
    say "installing the edge set for $arch into $root/opt/fedplane-deps"
    rm -rf "$root/opt/fedplane-deps"
    if [ "$arch" = arm64 ]; then  # PyPI's aarch64 wheels, resolved on the host for the guest's platform
      "$py" -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); m = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA")); print("\n".join(l.split(":", 1)[1].strip() for l in z.read(m).decode().splitlines() if l.startswith("Requires-Dist:") and "extra ==" not in l))' "$wheel" > "$cache/requirements.txt"
      "$py" -m pip install -q --no-warn-conflicts --target "$root/opt/fedplane-deps" --only-binary=:all: --find-links "$wheels" \
        --platform manylinux_2_28_aarch64 --platform manylinux_2_17_aarch64 --platform manylinux2014_aarch64 \
        --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none -r "$cache/requirements.txt" >&2
    else  # Debian's python3-* packages hold the rest; pybloom-live is pure Python and not in Debian
      "$py" -m pip install -q --no-deps --target "$root/opt/fedplane-deps" "$wheels"/pybloom_live-*.whl >&2
    fi
    echo "$reqs" > "$root/opt/.fedplane-deps"
  fi
  rm -rf "$root/opt/fedplane"
  "$py" -m pip install -q --no-deps --no-compile --target "$root/opt/fedplane" "$wheel" >&2
}

# 4. Inputs for the policy comparison, recorded once on the host (amd64) and scored on every side.
cases=$cache/cases.npz
"$py" -m federated.runtime.agreement record "$cases"
nice -n 5 "$py" -m federated.runtime.agreement choose "$cases" > "$cache/amd64.json"

runs=()
cleanup() { for a in $arches; do mountpoint -q "$cache/$a/proc" && umount "$cache/$a/proc"; done; return 0; }
trap cleanup EXIT
for arch in $arches; do
  rootfs "$arch"
  install_fedplane "$arch"
  root=$cache/$arch
  cp "$cases" "$root/opt/cases.npz"
  mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
  say "$arch: fedplane agent --check, then $agents emulated agents placing $pods pods (niced; minutes)"
  nice -n 5 "$py" -m fedplane.lab.drills.archcheck --root "$root" --agents "$agents" --pods "$pods" --cases /opt/cases.npz \
    > "$cache/$arch.json" || say "$arch: the cluster run failed (see $root/srv/fedplane-archcheck/*/agent.log)"
  runs+=("$arch=$cache/$arch.json")
done

# 5. The container image, where an engine exists (foreign platforms through the binfmt registration above).
if [ $image = 1 ]; then
  engine=$(command -v podman || command -v buildah || true)
  for arch in $arches; do
    platform=$([ "$arch" = arm64 ] && echo linux/arm64 || echo linux/arm/v7)
    if [ -z "$engine" ]; then
      say "no podman or buildah here: build the image with 'podman build --platform $platform -t fedplane-agent:0.1.0-$arch -f deploy/container/Containerfile .' (or buildah build, same arguments)"
    else
      say "building fedplane-agent:0.1.0-$arch with $engine"
      nice -n 10 "$engine" build --platform "$platform" -t "fedplane-agent:0.1.0-$arch" -f "$repo/deploy/container/Containerfile" "$repo" >&2 \
        || say "$arch: the image build failed"
    fi
  done
fi

# 6. One report.
"$py" -m fedplane.lab.drills.archcheck summarize --reference "$cache/amd64.json" --wall "$(( $(date +%s) - start ))" \
  $([ $json = 1 ] && echo --json) "${runs[@]}"
