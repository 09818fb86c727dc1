"""JupyterHub for a workshop room: N participants served from one GPU server, each a Unix user of their own.

    mkdir -p /srv/room && cd /srv/room     # the hub keeps its state here: database, secrets, participants' homes
    sudo COURSE_ROOM_PASSWORD=pick-one-8+ COURSE_ROOM_RECORDED=1 \\
        COURSE_ROOM_ADMIN=teacher COURSE_ROOM_ADMIN_PASSWORD=$(openssl rand -hex 16) \\
        /path/to/course/.venv/bin/jupyterhub -f /path/to/course/workshop/jupyterhub_config.py --port 8000

Participants open http://<server>:8000, log in with a name of their choice, the room's password and a password of
their own (their first login sets it: the name is theirs from then on), and get JupyterLab on their own copy of
the lessons, exercises and solutions, on one of the box's GPUs (the least-loaded one). The hub listens on --port
(8000 above) and uses two more ports of the box's own: 8081 (the hub's API, for the servers) and 8001 (the
proxy's API); a second hub on the same box needs others (--JupyterHub.hub_port, --ConfigurableHTTPProxy.api_url).
Knobs, as environment variables of the hub:
  COURSE_ROOM_PASSWORD   the room's shared password (8 characters or more; required)
  COURSE_ROOM_RECORDED=1 participants see the recorded figures (COURSE_RECORDED=1 in each server): nobody
                         times an 8192^3 GEMM on a card others share; kernels still run
  COURSE_ROOM_GPUS       the GPUs to share out, e.g. "1,2,3" to keep GPU 0 for the projector (default: every
                         GPU `nvidia-smi -L` lists; none without nvidia-smi, then everyone runs in CPU mode)
  COURSE_ROOM_ADMIN      the instructor's login name: an admin of the hub (the hub's admin page, every server),
  COURSE_ROOM_ADMIN_PASSWORD  with a password of its own (32 characters or more; the room's does not log in as it)
  COURSE_ROOM_TERMINALS=1  give participants JupyterLab's terminal (off by default: a shell on the GPU server)
  COURSE_ROOM_PROXY=python   the Python port of the proxy even where npm's configurable-http-proxy is on PATH
  COURSE_ROOM_MEMORY     each participant's memory, server and kernels together, e.g. "4G" (cgroups; as root)

Separation (as The Littlest JupyterHub does it on one server), when the hub runs as root: each participant is
the Unix user ``jupyter-<name>``, created at the first login, with a home of their own under ./home that only
they can read; their server and kernels run as that user. The hub's database and cookie secret are created
readable by the hub alone (umask 077); the course is imported from where it is installed and must not be
writable by others (the hub refuses to start otherwise). Started by another user, the hub cannot switch users:
it says so, and every participant's server runs as that user, in a folder of its own, unseparated.
"""
import hashlib
import hmac
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from jupyterhub.authenticators.shared import SharedPasswordAuthenticator
from jupyterhub.spawner import LocalProcessSpawner, set_user_setuid
from tornado import web

c = get_config()  # noqa: F821  (JupyterHub defines it when it loads this file)
COURSE = Path(__file__).resolve().parents[1]
STATE = Path.cwd()
SEPARATE = os.geteuid() == 0  # only root can start a server as another user
PREFIX = "jupyter-"
# a Unix user name is at most 32 characters (useradd): 8 for the prefix, 24 for the participant's name
NAME = re.compile(r"[a-z][a-z0-9-]{0,23}")
NAME_RULE = ("a name is 1 to 24 characters: lower-case letters, digits and '-', starting with a letter "
             "(for example ada or team-3)")


def unix_name(name):
    return PREFIX + name


class RoomAuthenticator(SharedPasswordAuthenticator):
    """The room's password, a name of the participant's choice, and a password of their own that their first login
    sets: from then on the name is theirs (the room's password alone no longer logs in as it). A name the room
    cannot use is refused with the rule, not with the login page's 'invalid username or password'."""
    request_otp = True  # the login form's third field: the participant's own password (made a password field below)
    otp_prompt = "Your own password, 6 characters or more (your first login sets it; the one above is the room's):"

    async def authenticate(self, handler, data):
        data = data or {}
        name = self.normalize_username(data.get("username", "").strip())
        if not NAME.fullmatch(name):
            raise web.HTTPError(403, f"the name {name[:40]!r} cannot be used: {NAME_RULE}")
        user = await super().authenticate(handler, data)
        if user is None or user.get("admin"):  # the wrong room password; or the instructor, with their own
            return user
        own = data.get("otp") or ""
        if len(own) < 6:
            raise web.HTTPError(403, "choose a password of your own, 6 characters or more, in the third field: "
                                     "it keeps your name yours (the room's password is everyone's)")
        return user if own_password_matches(name, own) else None


def own_password_matches(name, own, path=None):
    """Whether ``own`` is ``name``'s own password; the first time a name comes, it becomes so. Kept as scrypt hashes
    in the hub's folder (readable by the hub alone; delete a name's entry to let its participant choose again)."""
    path = Path(path or STATE / "room-passwords.json")
    kept = json.loads(path.read_text()) if path.exists() else {}
    if name not in kept:
        salt = os.urandom(16)
        kept[name] = {"salt": salt.hex(), "hash": hashlib.scrypt(own.encode(), salt=salt, n=2**14, r=8, p=1).hex()}
        path.write_text(json.dumps(kept, indent=1))
        path.chmod(0o600)
        return True
    entry = kept[name]
    got = hashlib.scrypt(own.encode(), salt=bytes.fromhex(entry["salt"]), n=2**14, r=8, p=1).hex()
    return hmac.compare_digest(got, entry["hash"])


# Who: the room's password lets people in, their own password keeps their name theirs. Right for a day on a
# trusted network; for anything longer or open to the internet, use real accounts (PAMAuthenticator with system
# users, or oauthenticator's GitHubOAuthenticator) and HTTPS (c.JupyterHub.ssl_cert / ssl_key, or a reverse proxy).
c.JupyterHub.authenticator_class = RoomAuthenticator
c.JupyterHub.template_paths = [str(Path(__file__).parent / "templates")]  # the third field as a password field
c.SharedPasswordAuthenticator.user_password = os.environ.get("COURSE_ROOM_PASSWORD") or sys.exit(
    "set COURSE_ROOM_PASSWORD (8 characters or more): the password participants log in with")
c.Authenticator.allow_all = True
if os.environ.get("COURSE_ROOM_ADMIN"):  # the instructor logs in with a password of their own, not the room's
    c.Authenticator.admin_users = {os.environ["COURSE_ROOM_ADMIN"]}
    c.SharedPasswordAuthenticator.admin_password = os.environ.get("COURSE_ROOM_ADMIN_PASSWORD") or sys.exit(
        "COURSE_ROOM_ADMIN is set: set COURSE_ROOM_ADMIN_PASSWORD too (32 characters or more), the instructor's "
        "own password (the room's password never logs in as the admin)")



def proxy_command():
    """JupyterHub's own proxy, configurable-http-proxy from npm (Node 20+), where PATH has it; else its Python port
    pinned in requirements.txt, run by this Python (an unpacked wheel has no script for it; COURSE_ROOM_PROXY=python
    asks for the port): ([command], which)."""
    if os.environ.get("COURSE_ROOM_PROXY") != "python":
        for folder in os.environ.get("PATH", "").split(os.pathsep):
            script = Path(folder or ".") / "configurable-http-proxy"
            if script.is_file() and os.access(script, os.X_OK):
                with open(script, "rb") as f:
                    if b"node" in f.readline():
                        return [str(script)], "npm"
    return [sys.executable, "-c", "import sys; from configurable_http_proxy.cli import main; sys.exit(main())"], "python"


c.ConfigurableHTTPProxy.command, PROXY = proxy_command()
print(f"[workshop] the proxy: configurable-http-proxy from {'npm' if PROXY == 'npm' else 'PyPI, the Python port'} "
      f"({' '.join(c.ConfigurableHTTPProxy.command)})", file=sys.stderr)

# what the hub writes (database, cookie secret, participants' files it copies) is its own unless opened on purpose
os.umask(0o077)


def _writable_by_others(root):
    """The first file or folder under ``root`` (the course) that a participant could change, or None."""
    for path in [root, *root.joinpath("kernels").rglob("*")]:
        if path.stat().st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return path
    return None


if SEPARATE:
    unsafe = _writable_by_others(COURSE)
    if unsafe:  # a participant could change the code every other participant imports
        sys.exit(f"{unsafe} is writable by other users: the course must be read-only to participants "
                 f"(chmod -R go-w {COURSE})")


def _bytes(size):
    """'4G', '512M', '1073741824' -> bytes."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    size = size.strip().upper().removesuffix("B").removesuffix("I")
    return int(float(size[:-1]) * units[size[-1]]) if size[-1:] in units else int(size)


class MemoryGroups:
    """Each participant's server and kernels in a control group of their own, limited together to ``limit`` bytes:
    cgroup v2 where the box has it (memory.max), else v1's memory controller (memory.limit_in_bytes). Past the
    limit the kernel's out-of-memory killer ends a process of that participant's, no one else's."""

    def __init__(self, limit, root=Path("/sys/fs/cgroup")):
        self.limit = limit
        v2 = root / "cgroup.controllers"
        if v2.exists() and "memory" in v2.read_text().split():
            self.room, self.knob = root / "course-room", "memory.max"
            (root / "cgroup.subtree_control").write_text("+memory")
            self.room.mkdir(exist_ok=True)
            (self.room / "cgroup.subtree_control").write_text("+memory")
        elif (root / "memory" / "memory.limit_in_bytes").exists():
            self.room, self.knob = root / "memory" / "course-room", "memory.limit_in_bytes"
            self.room.mkdir(exist_ok=True)
        else:
            raise OSError(f"no cgroup memory controller under {root}")

    def group(self, user):
        """The group of ``user``, made and limited (again: the room may have changed its limit)."""
        group = self.room / user
        group.mkdir(exist_ok=True)
        (group / self.knob).write_text(str(self.limit))
        return group


MEMORY = None
if os.environ.get("COURSE_ROOM_MEMORY"):
    try:
        MEMORY = MemoryGroups(_bytes(os.environ["COURSE_ROOM_MEMORY"]))
        MEMORY.group("jupyter-probe").rmdir()  # a limit can be set here: fail now, not at the first login
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"COURSE_ROOM_MEMORY={os.environ['COURSE_ROOM_MEMORY']}: cannot limit participants' memory on this "
                 f"box ({e}); the hub must run as root on a box with cgroups (v2, or v1's memory controller)")


class RoomSpawner(LocalProcessSpawner):
    """A participant's server as their own Unix user, ``jupyter-<name>``, in their home (and, with
    COURSE_ROOM_MEMORY, in their memory group: joined before the process drops to the user)."""

    def user_env(self, env):
        import pwd
        user = pwd.getpwnam(unix_name(self.user.name))
        # the room's home, not the user's recorded one: a user kept from another day may have another
        env.update(USER=user.pw_name, HOME=str(home_of(self.user.name)), SHELL=user.pw_shell)
        return env

    def make_preexec_fn(self, name):
        become = set_user_setuid(unix_name(name))
        home = home_of(name)
        procs = MEMORY.group(unix_name(name)) / "cgroup.procs" if MEMORY else None

        def preexec():
            if procs:
                procs.write_text(str(os.getpid()))  # the server, and every kernel it starts, count against the group
            become()
            os.chdir(home)  # become() goes to the user's recorded home, which for a user from another day is not this
        return preexec


class SharedSpawner(LocalProcessSpawner):
    """Without root: every server as the hub's own user, each in a folder of its own (no separation)."""

    def user_env(self, env):
        env.update(USER=self.user.name, HOME=str(home_of(self.user.name)))
        return env

    def make_preexec_fn(self, name):
        home = home_of(name)
        return lambda: os.chdir(home)


def home_of(name):
    return STATE / "home" / (unix_name(name) if SEPARATE else name)


if SEPARATE:
    c.JupyterHub.spawner_class = RoomSpawner
else:
    print("[workshop] the hub is not running as root: it cannot start servers as other users, so every "
          "participant's server runs as this user and participants can reach each other's files", file=sys.stderr)
    c.JupyterHub.spawner_class = SharedSpawner
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]  # this environment's, whatever PATH says
c.Spawner.default_url = "/lab/tree/notebooks/00_memory_wall.ipynb"
# JupyterHub passes nothing of its own environment but what is named here (nvcc and nvidia-smi need PATH)
c.Spawner.env_keep = ["PATH", "LANG", "LC_ALL", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH",
                      "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV"]
c.Spawner.args = [] if os.environ.get("COURSE_ROOM_TERMINALS") == "1" else ["--ServerApp.terminals_enabled=False"]
if not SEPARATE and os.geteuid() == 0:
    c.Spawner.args.append("--allow-root")
c.Spawner.start_timeout = 120  # 30 servers starting at once on a busy box
# a restart of the hub (a setting changed, a crash) leaves the participants' servers and kernels running: the
# restarted hub finds them in its database and routes to them again. End the day by stopping the servers first
# (the admin page's "Stop All", or each participant's File > Hub Control Panel), then the hub
c.JupyterHub.cleanup_servers = False


def participant_config(root):
    """Jupyter settings for every participant's server, in a folder on their JUPYTER_CONFIG_PATH (read before the
    environment's own): nbgrader's instructor menus and its formgrader off (the instructor grades; see the guide),
    and JupyterLab's news off (its pop-up asks every participant at their first start)."""
    lab = root / "labconfig"
    lab.mkdir(parents=True, exist_ok=True)
    nbgrader = ["formgrader", "validate_assignment", "assignment_list", "course_list"]
    (root / "jupyter_server_config.json").write_text(json.dumps({
        "ServerApp": {"jpserver_extensions": {f"nbgrader.server_extensions.{e}": False for e in nbgrader}},
        "LabApp": {"news_url": None}}, indent=1))
    (lab / "page_config.json").write_text(json.dumps({"disabledExtensions": {"@jupyter/nbgrader": True}}, indent=1))
    for path in (root, lab):
        path.chmod(0o755)
    for path in (root / "jupyter_server_config.json", lab / "page_config.json"):
        path.chmod(0o644)  # the hub's umask makes its files its own: these are read by every participant
    return root


PARTICIPANT_CONFIG = participant_config(STATE / "participant-config")


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


def create_user(user, home):
    """The Unix user ``user`` with ``home``, unless it exists: no password, no login shell (their server is
    started for them; no terminal unless the room gives one)."""
    import pwd
    try:
        pwd.getpwnam(user)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--home-dir", str(home), "--shell", "/usr/sbin/nologin",
                        "--user-group", user], check=True, capture_output=True)


def _make_home(name):
    """The participant's home (and, as root, their Unix user) at their first login; their own copy of the course's
    notebooks, exercises and solutions, kept when their server restarts, and of ./triton-seed, the Triton cache the
    instructor filled that morning (so kernels do not compile thirty times over, and no one runs another's)."""
    home = home_of(name)
    home.parent.mkdir(mode=0o711, parents=True, exist_ok=True)  # others may pass through, not list
    os.chmod(home.parent, 0o711)
    if SEPARATE:
        create_user(unix_name(name), home)
    home.mkdir(mode=0o700, exist_ok=True)
    os.chmod(home, 0o700)
    if SEPARATE:  # theirs even when useradd made none (the user was there already, from another day)
        shutil.chown(home, unix_name(name), unix_name(name))
    copies = {folder: COURSE / folder for folder in ("notebooks", "exercises", "solutions")}
    if (STATE / "triton-seed").is_dir():  # the instructor's compiled kernels: each participant gets a copy of their own
        copies[".triton/cache"] = STATE / "triton-seed"
    for folder, source in copies.items():
        if not (home / folder).exists():
            shutil.copytree(source, home / folder)
            if SEPARATE:
                subprocess.run(["chown", "-R", f"{unix_name(name)}:{unix_name(name)}",
                                str(home / folder.split("/")[0])], check=True)
    return home


def pre_spawn_hook(spawner):
    name = spawner.user.name
    home = _make_home(name)
    SEATS.pop(name, None)
    if GPUS:  # the least-loaded GPU (the first of equals), so the room spreads evenly
        load = {g: list(SEATS.values()).count(g) for g in GPUS}
        SEATS[name] = min(GPUS, key=load.get)
    env = {"CUDA_VISIBLE_DEVICES": SEATS.get(name, ""),  # "" hides every GPU: the course's CPU mode
           "PYTHONPATH": os.pathsep.join(filter(None, [str(COURSE), os.environ.get("PYTHONPATH")])),
           # the participant's own Triton cache: a shared one could be written by one and run by all
           "TRITON_CACHE_DIR": str(home / ".triton" / "cache"),
           "JUPYTER_CONFIG_PATH": str(PARTICIPANT_CONFIG)}
    if os.environ.get("COURSE_ROOM_RECORDED") == "1":
        env["COURSE_RECORDED"] = "1"
    spawner.environment = {**spawner.environment, **env}
    spawner.log.info("%s: GPU %r, COURSE_RECORDED=%s", name, env["CUDA_VISIBLE_DEVICES"], env.get("COURSE_RECORDED", "0"))


def post_stop_hook(spawner):
    SEATS.pop(spawner.user.name, None)


c.Spawner.pre_spawn_hook = pre_spawn_hook
c.Spawner.post_stop_hook = post_stop_hook
