#!/usr/bin/env bash
# Wheels for running ddrl (benchmarks/gpu_check.py) on a GPU machine that has Python 3.12 and a
# CUDA torch but no package index, no Ray and no gymnasium: writes them to .whl/ at the
# repository's root (kept out of git through .git/info/exclude). Ray's wheel (79 MB) is trimmed
# of its Java jars, RLlib, Serve, LLM and the dashboard's web client (to ~42 MB), which ddrl
# never loads, and pygame (which gymnasium's box2d envs import) of its docs, examples and tests;
# about 52 MB in all, beside ~7 MB of tracked files (a device call carries 64 MiB). Extra wheels may be named: bash benchmarks/gpu_carry.sh ale-py==0.12.1
#
# --mujoco (first argument): MuJoCo instead of Box2D, for HalfCheetah-v5 and the other MuJoCo
# ids: mujoco 3.14.0 trimmed of its experimental studio, viewer, headers and filament renderer
# (29 MB to ~8 MB; gymnasium's MuJoCo envs import only its core), and glfw and imageio, which
# gymnasium's MujocoEnv imports for rendering even when it renders nothing; Box2D and pygame are
# left out to stay under 64 MiB (about 49 MB in all).
#
# On the GPU machine, from the repository's root:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
#     && export PYTHONPATH=/tmp/site:$PWD
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
sims=(box2d==2.3.10 pygame==2.6.1)
if [ "${1:-}" = "--mujoco" ]; then
  shift
  sims=(mujoco==3.14.0 glfw==2.11.0 imageio==2.38.1)
fi
rm -rf .whl
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_28_x86_64 -d .whl \
  ray==2.60.0 gymnasium==1.4.0 farama-notifications==0.0.6 jsonschema==4.26.0 \
  jsonschema-specifications referencing rpds-py threadpoolctl==3.8.0 "${sims[@]}" "$@"
python3 - <<'PY'
import glob, os, zipfile
# gymnasium's box2d envs import pygame even without rendering: its docs, examples and tests go
drop = ('ray/jars/', 'ray/rllib/', 'ray/serve/', 'ray/llm/', 'ray/dashboard/client/',
        'pygame/docs/', 'pygame/examples/', 'pygame/tests/',
        'mujoco/experimental/', 'mujoco/_render_filament', 'mujoco/include/', 'mujoco/viewer',
        'mujoco/_simulate')
for src in glob.glob('.whl/ray-*.whl') + glob.glob('.whl/pygame-*.whl') + glob.glob('.whl/mujoco-*.whl'):
    tmp = src + '.tmp'
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, 'w', zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            if info.filename.startswith(drop):
                continue
            data = zin.read(info.filename)
            if info.filename.endswith('.dist-info/RECORD'):  # pip checks nothing left out
                data = b'\n'.join(line for line in data.split(b'\n')
                                  if not line.startswith(tuple(d.encode() for d in drop)))
            zout.writestr(info, data)
    os.replace(tmp, src)
PY
du -ch .whl/*.whl | tail -1
