"""The workshop room (workshop/jupyterhub_config.py): the real hub on 127.0.0.1 with its proxy, two
participants logged in with the room's password, each their own Unix user, their servers started, a lesson
cell executed in each through the server's REST API and kernel websocket, the GPU spread and the recorded
switch seen inside their kernels, one participant's attacks on the other, the hub and the course refused, and
everything shut down with no process left behind. A fake `nvidia-smi` lists two
GPUs, so the spread is tested on a machine without any (the kernels then find no GPU: CPU mode)."""
import asyncio
import concurrent.futures
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import types
import uuid
from pathlib import Path

import pytest

from kernels.tools import room

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "workshop" / "jupyterhub_config.py"
PASSWORD = "room-password-for-the-test"
FAKE_SMI = "#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-fake-0)'\necho 'GPU 1: NVIDIA H200 (UUID: GPU-fake-1)'\n"
CELL = """import os
import kernels
kernels.banner()
from kernels.lessons import l00_memory_wall as lesson
ceil = lesson.ceilings()
print(f"ridge {ceil.ridge:.0f} FLOP/B ({ceil.label})")
open(os.path.join(os.environ["HOME"], "mine.txt"), "w").close()  # their home is theirs to write in
print("seat", repr(os.environ.get("CUDA_VISIBLE_DEVICES")), repr(os.environ.get("COURSE_RECORDED")), os.getcwd(),
      os.environ["HOME"])
"""


def _fake_smi(folder):
    folder.mkdir(exist_ok=True)
    smi = folder / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


def _load_config(monkeypatch, tmp_path, **env):
    """The config file as JupyterHub loads it (its hooks and settings), in ``tmp_path`` with ``env``."""
    pytest.importorskip("jupyterhub", reason="jupyterhub is not installed (requirements.txt pins it)")
    from traitlets.config import Config
    for key in ("COURSE_ROOM_PASSWORD", "COURSE_ROOM_RECORDED", "COURSE_ROOM_GPUS", "COURSE_ROOM_ADMIN",
                "COURSE_ROOM_TERMINALS", "COURSE_ROOM_PROXY", "COURSE_ROOM_MEMORY"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    c = Config()
    scope = {"get_config": lambda: c, "__file__": str(CONFIG)}
    mask = os.umask(0o022)  # the config sets the hub's umask: not this test process's
    try:
        exec(compile(CONFIG.read_text(), str(CONFIG), "exec"), scope)
    finally:
        os.umask(mask)
    return c, scope


def _spawner(tmp_path, name):
    log = types.SimpleNamespace(info=lambda *a: None)
    return types.SimpleNamespace(user=types.SimpleNamespace(name=name), name="", log=log, environment={},
                                 home_dir=str(tmp_path / "participants" / name))


def test_hooks_spread_participants_over_the_gpus_and_pass_the_switch(monkeypatch, tmp_path):
    c, scope = _load_config(monkeypatch, tmp_path, COURSE_ROOM_PASSWORD=PASSWORD, COURSE_ROOM_RECORDED="1",
                            PATH=_fake_smi(tmp_path / "bin"))
    scope["create_user"] = lambda user, home: None  # no Unix users made by a unit test
    scope["SEPARATE"] = False
    seat = {}
    for name in ("ada", "bob", "cy"):
        s = _spawner(tmp_path, name)
        c.Spawner.pre_spawn_hook(s)
        seat[name] = s.environment["CUDA_VISIBLE_DEVICES"]
        assert s.environment["COURSE_RECORDED"] == "1"
        assert s.environment["PYTHONPATH"].split(os.pathsep)[0] == str(ROOT)
        for folder in ("notebooks", "exercises", "solutions"):
            assert (tmp_path / "home" / name / folder).is_dir(), folder
        assert s.environment["TRITON_CACHE_DIR"] == str(tmp_path / "home" / name / ".triton" / "cache")
        if name == "ada":  # the instructor fills the seed after the first participant came in
            (tmp_path / "triton-seed" / "abc").mkdir(parents=True)
            (tmp_path / "triton-seed" / "abc" / "k.cubin").write_text("compiled")
    assert not (tmp_path / "home" / "ada" / ".triton").exists()
    assert (tmp_path / "home" / "bob" / ".triton" / "cache" / "abc" / "k.cubin").read_text() == "compiled"
    assert seat == {"ada": "0", "bob": "1", "cy": "0"}
    c.Spawner.post_stop_hook(_spawner(tmp_path, "bob"))  # bob leaves: GPU 1 is the least loaded
    dee = _spawner(tmp_path, "dee")
    c.Spawner.pre_spawn_hook(dee)
    assert dee.environment["CUDA_VISIBLE_DEVICES"] == "1"

    c, scope = _load_config(monkeypatch, tmp_path, COURSE_ROOM_PASSWORD=PASSWORD, PATH=str(tmp_path / "nowhere"))
    scope["SEPARATE"] = False
    s = _spawner(tmp_path, "ada")
    c.Spawner.pre_spawn_hook(s)  # no nvidia-smi: no GPU, and no switch unless the room asks for it
    assert s.environment["CUDA_VISIBLE_DEVICES"] == "" and "COURSE_RECORDED" not in s.environment
    c, _ = _load_config(monkeypatch, tmp_path, COURSE_ROOM_PASSWORD=PASSWORD, COURSE_ROOM_GPUS="2, 3")
    assert c.Spawner.pre_spawn_hook.__globals__["GPUS"] == ["2", "3"]  # the instructor's choice of GPUs
    with pytest.raises(SystemExit, match="COURSE_ROOM_PASSWORD"):
        _load_config(monkeypatch, tmp_path)



def test_a_name_the_room_cannot_use_is_refused_with_the_rule(monkeypatch, tmp_path):
    from tornado import web
    c, scope = _load_config(monkeypatch, tmp_path, COURSE_ROOM_PASSWORD=PASSWORD)
    auth = scope["RoomAuthenticator"](user_password=PASSWORD)
    for name in ("x" * 300, "ada;rm", "../bob", "9lives", "a b", ""):
        with pytest.raises(web.HTTPError) as refused:
            asyncio.run(auth.authenticate(None, {"username": name, "password": PASSWORD}))
        assert refused.value.status_code == 403 and "1 to 24 characters" in refused.value.log_message, name
    wrong = {"username": "ada", "password": "wrong-password", "otp": "x" * 8}
    assert asyncio.run(auth.authenticate(None, wrong)) is None


def test_a_participants_first_login_makes_the_name_theirs(monkeypatch, tmp_path):
    """The room's password lets anyone in under a new name; the password of their own that came with its first
    login is needed from then on, so nobody else who knows the room's password can become them."""
    from tornado import web
    _, scope = _load_config(monkeypatch, tmp_path, COURSE_ROOM_PASSWORD=PASSWORD)
    auth = scope["RoomAuthenticator"](user_password=PASSWORD)

    def login(name, own, password=PASSWORD):
        return asyncio.run(auth.authenticate(None, {"username": name, "password": password, "otp": own}))
    with pytest.raises(web.HTTPError, match="a password of your own"):
        login("ada", "")
    assert login("Team-3", "teams-own")["name"] == "team-3"
    assert login("team-3", "another-one") is None  # someone else, with the room's password: refused
    assert login("team-3", "teams-own", password="not-the-room") is None
    assert login("team-3", "teams-own")["name"] == "team-3"
    kept = tmp_path / "room-passwords.json"
    assert kept.stat().st_mode & 0o077 == 0 and "teams-own" not in kept.read_text()


def test_no_terminal_unless_the_room_gives_one_and_the_instructor_is_admin(monkeypatch, tmp_path):
    with pytest.raises(SystemExit, match="COURSE_ROOM_ADMIN_PASSWORD"):
        _load_config(monkeypatch, tmp_path, COURSE_ROOM_PASSWORD=PASSWORD, COURSE_ROOM_ADMIN="teacher")
    c, scope = _load_config(monkeypatch, tmp_path, COURSE_ROOM_PASSWORD=PASSWORD, COURSE_ROOM_ADMIN="teacher",
                            COURSE_ROOM_ADMIN_PASSWORD="t" * 32)
    assert "--ServerApp.terminals_enabled=False" in c.Spawner.args and c.Authenticator.admin_users == {"teacher"}
    auth = scope["RoomAuthenticator"](config=c)
    assert asyncio.run(auth.authenticate(None, {"username": "teacher", "password": PASSWORD})) is None
    assert asyncio.run(auth.authenticate(None, {"username": "teacher", "password": "t" * 32}))["admin"]
    c, _ = _load_config(monkeypatch, tmp_path, COURSE_ROOM_PASSWORD=PASSWORD, COURSE_ROOM_TERMINALS="1")
    assert "--ServerApp.terminals_enabled=False" not in c.Spawner.args


def test_a_course_others_can_write_is_found(monkeypatch, tmp_path):
    _, scope = _load_config(monkeypatch, tmp_path, COURSE_ROOM_PASSWORD=PASSWORD)
    course = tmp_path / "course"
    (course / "kernels" / "lab").mkdir(parents=True)
    (course / "kernels" / "lab" / "mode.py").write_text("")
    for p in (course, course / "kernels", course / "kernels" / "lab", course / "kernels" / "lab" / "mode.py"):
        p.chmod(0o755)
    assert scope["_writable_by_others"](course) is None
    (course / "kernels" / "lab" / "mode.py").chmod(0o666)
    assert scope["_writable_by_others"](course) == course / "kernels" / "lab" / "mode.py"


def test_memory_groups_take_the_limit_on_either_cgroup_version(monkeypatch, tmp_path):
    """Each participant's group is made under the room's, with the limit written where the box's cgroup version
    reads it (trees faked here; the real one is the room test's); a limit the box cannot set stops the hub."""
    _, scope = _load_config(monkeypatch, tmp_path, COURSE_ROOM_PASSWORD=PASSWORD)
    assert [scope["_bytes"](v) for v in ("4G", "512M", "1.5GiB", "1024")] == [4 * 2**30, 512 * 2**20, 3 * 2**29, 1024]
    v1 = tmp_path / "v1"
    (v1 / "memory").mkdir(parents=True)
    (v1 / "memory" / "memory.limit_in_bytes").write_text("max")
    group = scope["MemoryGroups"](2**30, root=v1).group("jupyter-ada")
    assert group == v1 / "memory" / "course-room" / "jupyter-ada"
    assert (group / "memory.limit_in_bytes").read_text() == str(2**30)
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpuset cpu io memory pids")
    group = scope["MemoryGroups"](2**30, root=v2).group("jupyter-ada")
    enabled = [(v2 / where / "cgroup.subtree_control").read_text() for where in ("", "course-room")]
    assert enabled == ["+memory", "+memory"]
    assert (group / "memory.max").read_text() == str(2**30)
    with pytest.raises(OSError, match="no cgroup memory controller"):
        scope["MemoryGroups"](2**30, root=tmp_path / "none")
    with pytest.raises(SystemExit, match="COURSE_ROOM_MEMORY=lots: cannot limit"):
        _load_config(monkeypatch, tmp_path, COURSE_ROOM_PASSWORD=PASSWORD, COURSE_ROOM_MEMORY="lots")

# ---- the real hub ------------------------------------------------------------------------------

def _wait(what, check, timeout, hub, log):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if hub.poll() is not None:
            pytest.fail(f"the hub exited ({hub.returncode}) while waiting for {what}:\n{log.read_text()[-4000:]}")
        got = check()
        if got:
            return got
        time.sleep(0.3)
    pytest.fail(f"timed out waiting for {what}:\n{log.read_text()[-4000:]}")


# what a participant tries from their own kernel, each attempt refused or not ({state}, {course}, {other} filled in)
ATTACKS = """
import glob, json, os
from pathlib import Path
state, course, other = Path({state!r}), Path({course!r}), "jupyter-" + {other!r}
tries = {{}}

def attempt(what, act):
    try:
        act()
        tries[what] = "ALLOWED"
    except PermissionError:
        tries[what] = "refused"
    except OSError as e:  # not there, say: the attack did not reach what it aimed at
        tries[what] = f"missed: {{e!r}}"

attempt("write into the other's exercises", lambda: (state / "home" / other / "exercises" / "mine.py").write_text("x"))
attempt("list the other's home", lambda: os.listdir(state / "home" / other))
attempt("read the other's kernel connection files",
        lambda: os.listdir(state / "home" / other / ".local" / "share" / "jupyter" / "runtime"))
attempt("read the hub's cookie secret", lambda: (state / "jupyterhub_cookie_secret").read_bytes())
attempt("read the hub's database", lambda: (state / "jupyterhub.sqlite").read_bytes())
attempt("change the course everyone imports", lambda: open(course / "kernels" / "lab" / "mode.py", "a").close())
leaks = []  # another process's token: a server's (JUPYTERHUB_API_TOKEN), the proxy's (CONFIGPROXY_AUTH_TOKEN)
for path in glob.glob("/proc/[0-9]*/environ"):
    try:
        if os.stat(path).st_uid != os.getuid() and b"_TOKEN=" in Path(path).read_bytes():
            leaks.append(path)
    except OSError:
        pass
tries["read another process's tokens"] = f"ALLOWED: {{leaks}}" if leaks else "refused"
print("ATTACKS", json.dumps(tries))
print("AS", os.getuid(), os.environ["USER"], os.environ["HOME"])
"""


def _runs_as_another_user(python):
    """Whether an unprivileged user can start ``python`` (a venv under a 0700 /root cannot be)."""
    run = subprocess.run(["su", "-s", "/bin/sh", "nobody", "-c", f"{python} -c pass"], capture_output=True)
    return run.returncode == 0


def _npm_proxy():
    """The folder holding npm's configurable-http-proxy (Node.js) on PATH, or None."""
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        found = Path(folder or ".") / "configurable-http-proxy"
        if found.is_file() and b"node" in found.read_bytes()[:64]:
            return folder
    return None


@pytest.mark.parametrize("proxy", ["npm", "python"])
def test_a_room_of_two_runs_a_lesson_cell_each_apart_and_shuts_down_clean(tmp_path, proxy):
    """Behind each proxy (JupyterHub's own from npm, and its Python port), two participants, each their own Unix
    user: a lesson cell runs in each kernel on its GPU with the recorded switch; from ada's kernel every reach into
    bob's files, the hub's secrets, the course's code or another process's token is refused, and her memory limit
    holds her processes; ada's token opens nothing of bob's; logging in as bob with the room's password is refused;
    there is no terminal and no nbgrader menu; a name the room cannot use is refused with the rule; a restart of
    the hub keeps the kernels; the hub stops with nothing left running."""
    pytest.importorskip("jupyterhub", reason="jupyterhub is not installed (requirements.txt pins it)")
    if os.geteuid() != 0:
        pytest.skip("the room separates participants as Unix users: the hub must run as root (CI runs as root)")
    if not _runs_as_another_user(sys.executable):
        pytest.skip(f"{sys.executable} cannot be run by another user (is it under a 0700 /root? CI makes /root "
                    "traversable: .ci/run)")
    import psutil
    import requests
    import tempfile
    state = Path(tempfile.mkdtemp(prefix="room-", dir="/tmp"))  # pytest's own tmp folders are closed to others
    state.chmod(0o711)
    suffix = uuid.uuid4().hex[:4]
    names = (f"ada-{suffix}", f"bob-{suffix}")
    port, hub_port, proxy_api = room.free_ports(3)
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PATH": _fake_smi(tmp_path / "bin"), "COURSE_ROOM_PASSWORD": PASSWORD,
           "COURSE_ROOM_RECORDED": "1"}
    for key in ("COURSE_ROOM_GPUS", "COURSE_ROOM_ADMIN", "COURSE_ROOM_TERMINALS", "COURSE_ROOM_PROXY"):
        env.pop(key, None)
    env["COURSE_ROOM_MEMORY"] = "1536M"  # a server and a kernel after a lesson cell: about 0.5 GiB (the guide)
    if proxy == "python":
        env["COURSE_ROOM_PROXY"] = "python"
    elif not _npm_proxy():  # CI installs it (.ci/run) and says so: there it must not be skipped
        if os.environ.get("COURSE_NPM_PROXY") == "required":
            pytest.fail("npm's configurable-http-proxy is not on PATH, and COURSE_NPM_PROXY=required")
        pytest.skip("npm's configurable-http-proxy is not on PATH (npm install -g configurable-http-proxy@5.3.0)")
    log = tmp_path / "hub.log"
    # bob's Unix user is there already, from another day, with a home elsewhere: the room gives him its own
    subprocess.run(["useradd", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
                    "--user-group", f"jupyter-{names[1]}"], check=True)

    def start_hub():
        with open(log, "a") as sink:
            return subprocess.Popen(
                [sys.executable, "-m", "jupyterhub", "-f", str(CONFIG), "--ip", "127.0.0.1", "--port", str(port),
                 "--JupyterHub.hub_ip=127.0.0.1", f"--JupyterHub.hub_port={hub_port}",
                 f"--ConfigurableHTTPProxy.api_url=http://127.0.0.1:{proxy_api}"],
                cwd=state, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)

    def up():
        try:
            return requests.get(f"{url}/hub/api", timeout=2).ok
        except requests.ConnectionError:
            return False

    hub = start_hub()
    started = []  # every process of the room, gathered while it runs, to check none outlives the hub
    try:
        _wait("the hub", up, 60, hub, log)
        auth = {name: room.login(url, name, PASSWORD, f"own-{name}") for name in names}
        pool = concurrent.futures.ThreadPoolExecutor(len(names))  # a spawn request waits up to 10 s: both at once
        for r in pool.map(lambda name: requests.post(f"{url}/hub/api/users/{name}/server", headers=auth[name]), names):
            assert r.status_code in (201, 202), r.text
        for name in names:
            _wait(f"{name}'s server", lambda: requests.get(f"{url}/hub/api/users/{name}", headers=auth[name])
                  .json()["servers"].get("", {}).get("ready"), 90, hub, log)
        kernels = {}
        for name in names:
            r = requests.post(f"{url}/user/{name}/api/kernels", json={"name": "python3"}, headers=auth[name])
            assert r.status_code == 201, r.text
            kernels[name] = r.json()["id"]

        async def both():
            return await asyncio.gather(*(room.execute(
                f"ws://127.0.0.1:{port}/user/{name}/api/kernels/{kernels[name]}/channels", auth[name], CELL)
                for name in names))
        ran = dict(zip(names, asyncio.run(both())))
        seats = []
        for name in names:
            out, errors = ran[name]
            assert not errors, f"{name}'s cell failed: {errors}\n{out}"
            assert "COURSE_RECORDED=1: every timing and widget figure is the recorded one" in out, out
            assert "ridge " in out and "recorded on " in out, out
            seat = next(line.split() for line in out.splitlines() if line.startswith("seat "))
            home = str(state / "home" / f"jupyter-{name}")
            assert seat[2:] == ["'1'", home, home], out  # the switch, their own home
            seats.append(seat[1])
        assert sorted(seats) == ["'0'", "'1'"], f"two participants on two GPUs should sit one per GPU: {seats}"
        ada, bob = names
        out, errors = asyncio.run(room.execute(f"ws://127.0.0.1:{port}/user/{ada}/api/kernels/{kernels[ada]}/channels",
                                           auth[ada], ATTACKS.format(state=str(state), course=str(ROOT), other=bob)))
        assert not errors, errors
        tries = json.loads(next(line[8:] for line in out.splitlines() if line.startswith("ATTACKS ")))
        assert len(tries) == 7 and all(v == "refused" for v in tries.values()), tries
        assert f" jupyter-{ada} " in next(line for line in out.splitlines() if line.startswith("AS ")), out
        # the participant's memory limit holds their processes: 2 GiB touched is killed, 256 MiB is not
        out, errors = asyncio.run(room.execute(
            f"ws://127.0.0.1:{port}/user/{ada}/api/kernels/{kernels[ada]}/channels", auth[ada],
            "import subprocess, sys\n"
            "touch = 'b = bytearray({} * 2**20); b[::4096] = bytes(len(b[::4096]))'\n"
            "print('RC', [subprocess.run([sys.executable, '-c', touch.format(n)]).returncode for n in (256, 2048)])"))
        assert not errors and "RC [0, -9]" in out, (errors, out)
        assert requests.get(f"{url}/user/{bob}/api/contents", headers=auth[ada]).status_code in (403, 404)
        assert requests.post(f"{url}/user/{ada}/api/terminals", headers=auth[ada]).status_code == 404
        # what a participant's JupyterLab shows: no nbgrader menus or formgrader, no news pop-up
        assert requests.get(f"{url}/user/{ada}/formgrader", headers=auth[ada]).status_code == 404
        if importlib.util.find_spec("jupyterlab"):  # (the GPU box's offline bundle has the hub, not JupyterLab)
            page = requests.get(f"{url}/user/{ada}/lab", headers=auth[ada]).text
            config = json.loads(re.search(r'id="jupyter-config-data"[^>]*>\s*(.*?)\s*</script>', page, re.S).group(1))
            assert "@jupyter/nbgrader" in config["disabledExtensions"] and not config.get("newsUrl"), config
        refused = requests.Session()
        refused.get(f"{url}/hub/login")
        r = refused.post(f"{url}/hub/login", data={"username": "x" * 300, "password": PASSWORD, "otp": "whatever",
                                                   "_xsrf": refused.cookies["_xsrf"]}, allow_redirects=False)
        assert r.status_code == 403 and "1 to 24 characters" in r.text, (r.status_code, r.text[-500:])
        r = refused.post(f"{url}/hub/login", data={"username": bob, "password": PASSWORD, "otp": "not-bobs-own",
                                                   "_xsrf": refused.cookies["_xsrf"]}, allow_redirects=False)
        assert r.status_code != 302 and not any(k.startswith("jupyterhub-hub-login") for k in refused.cookies.keys())
        page = refused.get(f"{url}/hub/login").text  # the third field is a password field, with its prompt
        assert 'type="password"' in page.split('id="otp_input"')[1][:200] and "your first login sets it" in page
        started = psutil.Process(hub.pid).children(recursive=True)
        assert len(started) >= 5, f"proxy, two servers and their kernels expected: {started}"
        runs = [" ".join(p.cmdline()) for p in started if re.search("configurable.http.proxy", " ".join(p.cmdline()))]
        assert runs and all(("node" in r) == (proxy == "npm") for r in runs), runs  # the proxy asked for
        # the instructor restarts the hub mid-session: servers and kernels carry on, with what they held
        channel = f"ws://127.0.0.1:{port}/user/{ada}/api/kernels/{kernels[ada]}/channels"
        assert not asyncio.run(room.execute(channel, auth[ada], "kept = 6 * 7"))[1]
        hub.send_signal(signal.SIGTERM)
        assert hub.wait(30) == 0, log.read_text()[-4000:]
        hub = start_hub()
        _wait("the hub, restarted", up, 60, hub, log)
        _wait(f"{ada}'s server through the new proxy", lambda: requests.get(
            f"{url}/user/{ada}/api/status", headers=auth[ada]).ok, 30, hub, log)
        out, errors = asyncio.run(room.execute(channel, auth[ada], "print('kept', kept)"))
        assert not errors and "kept 42" in out, (errors, out)
        started += psutil.Process(hub.pid).children(recursive=True)
        for r in pool.map(lambda name: requests.delete(f"{url}/hub/api/users/{name}/server", headers=auth[name]), names):
            assert r.status_code in (202, 204), r.text
        hub.send_signal(signal.SIGTERM)
        assert hub.wait(30) == 0, log.read_text()[-4000:]
        _, alive = psutil.wait_procs(started, timeout=15)
        assert not alive, f"left running after the hub stopped: {[p.pid for p in alive]}"
    finally:  # after a failure too: stop the hub as an instructor would, then end what it left, by pid
        if hub.poll() is None:
            started += psutil.Process(hub.pid).children(recursive=True)
            hub.send_signal(signal.SIGTERM)
            try:
                hub.wait(30)
            except subprocess.TimeoutExpired:
                hub.kill()
                hub.wait(10)
        for p in psutil.wait_procs(started, timeout=10)[1]:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        for name in names:  # the Unix users the room made, their homes, and their memory groups
            subprocess.run(["userdel", "--remove", f"jupyter-{name}"], capture_output=True)
            for groups in (Path("/sys/fs/cgroup/course-room"), Path("/sys/fs/cgroup/memory/course-room")):
                try:
                    (groups / f"jupyter-{name}").rmdir()
                except OSError:
                    pass
        shutil.rmtree(state, ignore_errors=True)


def test_the_room_measurement_reads_its_phases_and_peaks(tmp_path):
    """kernels.tools.room's bookkeeping (the H200 run itself is the guide's sizing): a live figure counts in the
    phase it was timed in, each process at its largest, and the summary compares the room with alone."""
    live = tmp_path / "live.jsonl"
    live.write_text("".join(json.dumps({"t": t, "name": "gemm", "ms": ms}) + "\n"
                            for t, ms in [(1, 1.0), (2, 3.0), (3, 2.0), (11, 5.0), (12, 7.0)]))
    assert room.live_medians(live, 0, 10) == {"gemm": {"ms": 2.0, "p90": pytest.approx(2.8), "max": 3.0, "n": 3}}
    assert room.live_medians(live, 10, 20)["gemm"] == {"ms": 6.0, "p90": pytest.approx(6.8), "max": 7.0, "n": 2}
    peaks = {1: {"kind": "server", "host": 130.4, "gpu": 0.0}, 2: {"kind": "kernel", "host": 1054.0, "gpu": 710.2},
             3: {"kind": "kernel", "host": 300.0, "gpu": 0.0}}
    assert room.memory_summary(peaks) == {"servers": [130], "kernels": [1054, 300], "contexts": [710]}
    report = {"device": "H200", "date": "today", "participants": 1, "separated": True, "proxy": "python",
              "notebooks": ["a.ipynb"], "memory": room.memory_summary(peaks),
              "live": {"alone_before": {"gemm": {"ms": 2.0}}, "room": {"gemm": {"ms": 2.2, "p90": 2.5}}, "alone_after": {}},
              "alone": [{"participant": "d", "notebook": "a.ipynb", "seconds": 10.0, "error": None, "mode": "hopper"}],
              "room": [{"participant": "p", "notebook": "a.ipynb", "seconds": s, "error": e, "mode": "hopper"}
                       for s, e in [(12.0, None), (18.0, None), (3.0, "stopped at the room's deadline")]]}
    text = room._summary(report)
    assert "(+10.0%; 90% under 2.500 ms)" in text and "alone   10.0 s   in the room: median   15.0 s over 2 runs" in text, text
    assert "0 stopped by an error" in text and "mode hopper" in text, text
