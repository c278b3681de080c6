from __future__ import annotations

import fcntl
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bounds  # noqa: E402
import helpers  # noqa: E402
import lab_groups  # noqa: E402
import snapshots  # noqa: E402
from helpers import FIXTURES, RELEASE_LAB_OPTIONS, STRICT, lab_cmd, lab_name, podman_available  # noqa: E402


def pytest_configure(config):
    config.pluginmanager.register(lab_groups, "provision-lab-groups")  # the lab tests' units for xdist


@pytest.hookimpl(trylast=True)  # after `-m` deselected: a unit-test session sees no lab test
def pytest_collection_modifyitems(config, items):
    labs = [item for item in items if "lab" in item.keywords or "molecule" in item.keywords]
    if not labs:
        return
    if podman_available():
        _remove_leftover_labs()
        return
    reason = "podman is not usable here (`podman info` failed); run scripts/test.sh (it installs it)"
    if STRICT:
        # scripts/test.sh and CI: a lab test that cannot run is a failure, not a skip
        raise pytest.UsageError(f"{reason}: {len(labs)} lab tests cannot run (PROVISION_TEST_STRICT=1)")
    for item in labs:
        item.add_marker(pytest.mark.skip(reason=reason))


# held for the whole session by a pytest run with lab tests: one per lab prefix on this machine
_SESSION_LOCK = None


def _remove_leftover_labs() -> None:
    """Labs of this prefix left by an earlier run that was killed before its `finally` blocks ran
    (CI once found a killed run's `t-lab32` nodes, and `lab up --nodes 65` seemed to have started them).
    Only when no other live session holds this prefix: its labs are in use, not left over.
    The workers of one xdist run (tests/lab_groups.py) are one session: the first (gw0) removes what was
    left over, during its collection (no worker's tests start before every worker has collected), then
    holds the prefix shared, as every other worker does once it has the lock: a later run of the same
    prefix leaves their labs alone until the last worker has ended."""
    global _SESSION_LOCK
    if os.environ.get("PROVISION_KEEP_LABS") == "1":
        return  # labs kept on purpose (for a look after a run) stay until their tests bring them up again
    prefix = lab_name("")
    lock = open(Path(tempfile.gettempdir()) / f"provision-test-labs-{prefix or 'none'}.lock", "w")  # noqa: SIM115
    if os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0":
        deadline = time.monotonic() + bounds.LAB_UP
        while True:  # gw0 holds it exclusively while it removes leftovers (one `lab down` per lab)
            try:
                fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
                _SESSION_LOCK = lock
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    lock.close()
                    return
                time.sleep(bounds.POLL_STEP)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        print(f"another test session uses the lab prefix {prefix!r}: its labs are left alone", file=sys.stderr)
        return
    _SESSION_LOCK = lock  # released when this process ends, however it ends
    for name in helpers.leftover_labs(prefix):
        print(f"removing lab {name}, left over from an earlier test run", file=sys.stderr)
        lab_cmd("down", lab_name=name, check=False, timeout=bounds.LAB_UP)
    try:  # shared now: the other workers of this run take it too (not atomic: another run may come between)
        fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        _SESSION_LOCK = None
        lock.close()


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    assert FIXTURES.is_dir(), f"fixtures missing at {FIXTURES}"
    return FIXTURES


class Lab:
    """A lab brought up for the tests and removed at the end of the session (unless PROVISION_KEEP_LABS=1)."""

    def __init__(self, name: str, nodes: int = 2, options: list[str] | None = None):
        self.name = name
        self.nodes = nodes
        self.options = options or []
        self.snapshot: str | None = None   # the snapshot reset() brings back
        self.first_run = None              # site.yml's fresh run, when this session made the lab
        self.dirty = False                 # a test module left it changed: reset() before the next one
        self.readme = None                 # the README's lab block, when it made this lab (_converged)

    def up(self) -> "Lab":
        # a fresh lab: nodes left over from an interrupted run are not bare any more
        lab_cmd("down", lab_name=self.name, check=False, timeout=bounds.LAB_UP)
        lab_cmd("up", "--nodes", str(self.nodes), *self.options, lab_name=self.name, timeout=bounds.LAB_UP)
        return self

    def save(self, snapshot: str) -> None:
        lab_cmd("save", snapshot, lab_name=self.name, timeout=bounds.LAB_UP)
        self.snapshot = snapshot

    def reset(self, *options: str) -> None:
        """The lab as its snapshot holds it (every node re-created from its image): seconds, not a site.yml."""
        assert self.snapshot, f"lab {self.name} has no snapshot to reset to"
        lab_cmd("up", "--from", self.snapshot, *options, lab_name=self.name, timeout=bounds.LAB_UP)
        self.dirty = bool(options)

    def down(self) -> None:
        if os.environ.get("PROVISION_KEEP_LABS") != "1":
            lab_cmd("down", lab_name=self.name, check=False, timeout=bounds.LAB_UP)


@pytest.fixture(scope="session")
def lab_factory():
    """lab_factory(name, nodes=2, options=[...]) -> Lab that is up; all removed at session end."""
    made: list[Lab] = []

    def make(name: str, nodes: int = 2, options: list[str] | None = None, *, up: bool = True) -> Lab:
        lab = Lab(name, nodes, options)
        if up:
            lab.up()
        made.append(lab)
        return lab

    yield make
    for lab in made:
        lab.down()


def _converged(lab_factory, short: str, nodes: int, timeout: float, *, readme: bool = False) -> Lab:
    """A lab of NODES on which site.yml ran green, from its snapshot when one exists for exactly this
    content (tests/snapshots.py), else fresh: site.yml on new nodes, then saved as that snapshot.
    README: the fresh run is the README's runnable lab block itself, as a newcomer types it (up to its
    `provision lab down`): the suite's fresh 2-node run and the README's test are one run."""
    from helpers import run_playbook

    lab = lab_factory(lab_name(short), nodes=nodes, up=False)
    snapshot = snapshots.name_for(lab_name(short), nodes)
    if snapshots.reuse() and snapshots.exists(snapshot):
        lab.snapshot = snapshot
        lab.reset()
        return lab
    if readme:
        lab_cmd("down", lab_name=lab.name, check=False, timeout=bounds.LAB_UP)
        lab.readme = helpers.readme_lab_block(lab.name, until="provision lab down", timeout=timeout)
        first = next(step["result"] for step in lab.readme if step["command"].startswith("ansible-playbook site.yml"))
    else:
        lab.up()
        first = run_playbook("site.yml", lab_name=lab.name, timeout=timeout)
    assert first.rc == 0, first
    lab.first_run = first
    snapshots.forget_older(lab_name(short), keep=snapshot)
    lab.save(snapshot)
    return lab


@pytest.fixture(scope="session")
def converged_lab(lab_factory):
    """A 2-node lab on which site.yml ran green (tests/snapshots.py: from a snapshot when one exists for
    this content). Use it through `converged` (tests that leave it as they found it) or `scratch_lab`."""
    return _converged(lab_factory, "site", 2, bounds.SITE_FRESH, readme=True)


@pytest.fixture(scope="module")
def converged(converged_lab):
    """The converged 2-node lab, as its snapshot holds it; the module's tests restore what they change."""
    if converged_lab.dirty:
        converged_lab.reset()
    return converged_lab


@pytest.fixture(scope="module")
def scratch_lab(converged_lab):
    """The converged 2-node lab for a module that changes it (installs, faults it does not undo): reset
    before the next module that uses it."""
    if converged_lab.dirty:
        converged_lab.reset()
    yield converged_lab
    converged_lab.dirty = True


@pytest.fixture(scope="session")
def provision_wheels(tmp_path_factory) -> Path:
    """provision built from this checkout and its dependencies as wheels (helpers.provision_wheelhouse),
    made once per session: the health check's installations on lab nodes (health timer, SLURM health
    check, trust boundary) all install from it, none writes to it."""
    return helpers.provision_wheelhouse(tmp_path_factory.mktemp("wheels") / "provision-wheels")


@pytest.fixture(scope="session")
def four_node_lab(lab_factory):
    """A 4-node lab on which site.yml ran green: the bad-node tests (issue 21) and the lifecycle
    tests (issue 24) share it; each test restores what it changed before it ends."""
    return _converged(lab_factory, "four", 4, bounds.SITE_FRESH_4)


@pytest.fixture(scope="session")
def release_lab(lab_factory):
    """3 bare systemd nodes, one per Debian release, and their package mirror: fresh VMs of each release.
    test_lab_flavours (which asserts they are fresh) and then test_lab_mirror (which installs packages on
    them, and whose last test takes the lab down) share one bring-up; molecule's releases scenario starts
    the same images and mirrors."""
    t0 = time.monotonic()
    made = lab_factory(lab_name("rel"), nodes=3, options=RELEASE_LAB_OPTIONS)
    print(f"3-release bare systemd lab with its mirror up in {time.monotonic() - t0:.1f} s (images and mirror "
          "included when not cached)")
    made.status = json.loads(lab_cmd("status", "--json", lab_name=made.name).stdout)
    return made


@pytest.fixture(scope="session")
def bastion_lab():
    """2 nodes behind a bastion, logged into as a cloud VM is (the admin ops with passwordless sudo, the
    training user trainer; login_labs.ShapeLab), site.yml run on them fresh once: the login-shape tests of
    test_login_bastion run on it, then test_trust_boundary's (a non-root training user, root reached through
    sudo). Removed at the end of the session, with the snapshot a test saves of it."""
    from login_labs import BASTION_LAB, ShapeLab

    made = ShapeLab(BASTION_LAB, ["--bastion"]).up()
    try:
        made.first = made.site(timeout=bounds.SITE_FRESH)
        made.first_seconds = made.first.seconds
        yield made
    finally:
        made.down()
        made.forget(f"{made.name}-snap")


class ScratchUser:
    """A training user for unit tests of root working in another user's home: uid/gid 65534 (the
    uid of `nobody`, which every Linux has: ssh-keygen refuses to run for a uid without a passwd
    entry), called `trainer` here, home `<base>/home/trainer` owned by it, beside `<base>/etc`, root's files standing in for
    /etc (a secret 0600 file, a directory). ``base`` is a fresh directory under /tmp that every user
    can traverse, so a child process switched to that uid reaches the home. ``patch(monkeypatch)``
    makes pwd answer for `trainer` with that uid and home (no user is added to this machine's /etc/passwd)."""

    UID = GID = 65534
    NAME = "trainer"

    def __init__(self, base: Path):
        import pwd

        self.base = base
        self.home = base / "home" / self.NAME
        self.etc = base / "etc"
        self.home.mkdir(parents=True)
        os.chown(self.home, self.UID, self.GID)
        self.etc.mkdir()
        self.secret = self.etc / "shadow"
        self.secret.write_text("root:$6$SECRET-HASH:19000:0:99999:7:::\n")
        os.chmod(self.secret, 0o600)
        self.pw = pwd.struct_passwd((self.NAME, "x", self.UID, self.GID, "", str(self.home), "/bin/bash"))

    def plant(self, rel: str, target: str | Path) -> Path:
        """A symbolic link at home/rel to target, made (and owned) by the user, as the user would."""
        path = self.home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chown(path.parent, self.UID, self.GID)
        path.symlink_to(target)
        os.lchown(path, self.UID, self.GID)
        return path

    def give(self, *paths: Path) -> None:
        for p in paths:
            os.lchown(p, self.UID, self.GID)

    def patch(self, monkeypatch) -> None:
        import pwd

        real_nam, real_uid = pwd.getpwnam, pwd.getpwuid
        monkeypatch.setattr(pwd, "getpwnam", lambda n: self.pw if n == self.NAME else real_nam(n))
        monkeypatch.setattr(pwd, "getpwuid", lambda u: self.pw if u == self.UID else real_uid(u))

    def system_state(self) -> dict:
        """owner, mode and content of everything under etc/ (what must not change)."""
        out = {}
        for p in sorted(self.etc.rglob("*")) + [self.etc]:
            st = p.lstat()
            out[str(p)] = (st.st_uid, st.st_gid, st.st_mode, p.read_bytes() if p.is_file() and not p.is_symlink() else None)
        return out


@pytest.fixture
def scratch_user():
    """ScratchUser (needs root: the home is given to another uid)."""
    import shutil
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("a home of another uid needs root")
    base = Path(tempfile.mkdtemp(prefix="provision-trust-", dir="/tmp"))
    os.chmod(base, 0o711)
    try:
        yield ScratchUser(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
