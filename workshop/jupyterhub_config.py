"""JupyterHub for a workshop room: N participants served from one GPU server.

    mkdir -p /srv/room && cd /srv/room     # the hub keeps its state here: database, secrets, participants' folders
    COURSE_ROOM_PASSWORD=pick-one-8+ COURSE_ROOM_RECORDED=1 \\
        /path/to/course/.venv/bin/jupyterhub -f /path/to/course/workshop/jupyterhub_config.py --port 8000

Participants open http://<server>:8000, log in with a name of their choice and the room's password,
and get JupyterLab on their own copy of the lessons and exercises, on one of the box's GPUs (the
least-loaded one). Knobs, as environment variables of the hub:
  COURSE_ROOM_PASSWORD   the room's shared password (8 characters or more; required)
  COURSE_ROOM_RECORDED=1 participants see the recorded figures (COURSE_RECORDED=1): nobody times an
                         8192^3 GEMM on a card others share; kernels still run
  COURSE_ROOM_GPUS       the GPUs to share out, e.g. "0,1" (default: every GPU `nvidia-smi -L` lists; none
                         without nvidia-smi, then everyone runs in CPU mode)
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

c = get_config()  # noqa: F821  (JupyterHub defines it when it loads this file)
COURSE = Path(__file__).resolve().parents[1]
STATE = Path.cwd()

# Who: one shared password, any name. Right for a day on a trusted network; for anything longer or
# open to the internet, use real accounts (PAMAuthenticator with system users, or oauthenticator's
# GitHubOAuthenticator) and HTTPS (c.JupyterHub.ssl_cert / ssl_key, or a reverse proxy).
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = os.environ.get("COURSE_ROOM_PASSWORD") or sys.exit(
    "set COURSE_ROOM_PASSWORD (8 characters or more): the password participants log in with")
c.Authenticator.allow_all = True

# The proxy: the Python port of configurable-http-proxy pinned in requirements.txt, beside this
# Python; without it JupyterHub looks for npm's configurable-http-proxy on PATH.
_proxy = Path(sys.executable).parent / "configurable-http-proxy"
if _proxy.exists():
    c.ConfigurableHTTPProxy.command = [str(_proxy)]

# Where: each server is a process of the hub's own user (no system accounts to create) in a folder of
# its own. Participants can read each other's files: fine in a room; to isolate them, use
# LocalProcessSpawner with system users, or DockerSpawner.
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = str(STATE / "participants" / "{username}")
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]  # this environment's, whatever PATH says
c.Spawner.default_url = "/lab/tree/notebooks/00_memory_wall.ipynb"
# JupyterHub passes nothing of its own environment but what is named here (nvcc and nvidia-smi need PATH)
c.Spawner.env_keep = ["PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH",
                      "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV"]
if os.geteuid() == 0:
    c.Spawner.args = ["--allow-root"]
c.Spawner.start_timeout = 120  # 30 servers starting at once on a busy box


def gpus():
    """The GPUs to share out: COURSE_ROOM_GPUS, else those `nvidia-smi -L` lists, else none."""
    if os.environ.get("COURSE_ROOM_GPUS"):
        return [g.strip() for g in os.environ["COURSE_ROOM_GPUS"].split(",") if g.strip()]
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, _ in enumerate(line for line in listed.splitlines() if line.startswith("GPU "))]


GPUS = gpus()
SEATS = {}  # participant -> the GPU their running server uses


def pre_spawn_hook(spawner):
    name, home = spawner.user.name, Path(spawner.home_dir)
    for folder in ("notebooks", "exercises"):  # their own copy, kept when their server restarts
        if not (home / folder).exists():
            shutil.copytree(COURSE / folder, home / folder)
    SEATS.pop(name, None)
    if GPUS:  # the least-loaded GPU (the first of equals), so the room spreads evenly
        load = {g: list(SEATS.values()).count(g) for g in GPUS}
        SEATS[name] = min(GPUS, key=load.get)
    env = {"CUDA_VISIBLE_DEVICES": SEATS.get(name, ""),  # "" hides every GPU: the course's CPU mode
           "PYTHONPATH": os.pathsep.join(filter(None, [str(COURSE), os.environ.get("PYTHONPATH")])),
           "TRITON_CACHE_DIR": str(STATE / "triton-cache")}  # shared: one participant's compile serves all
    if os.environ.get("COURSE_ROOM_RECORDED") == "1":
        env["COURSE_RECORDED"] = "1"
    spawner.environment = {**spawner.environment, **env}
    spawner.log.info("%s: GPU %r, COURSE_RECORDED=%s", name, env["CUDA_VISIBLE_DEVICES"], env.get("COURSE_RECORDED", "0"))


def post_stop_hook(spawner):
    SEATS.pop(spawner.user.name, None)


c.Spawner.pre_spawn_hook = pre_spawn_hook
c.Spawner.post_stop_hook = post_stop_hook
