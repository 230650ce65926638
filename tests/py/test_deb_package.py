"""The Debian package (packaging/, README "Installing"): `cpack -G DEB` on the build tree (it
installs what is built, builds nothing), the package's control data, then a real `dpkg --root`
install into an empty root and the installed `mla serve` started as its systemd unit says, with
the settings of its /etc/default/mla, probed on /health and one completion.

Why `dpkg --root` and not a chroot: an empty root has no shell or libraries, so neither the
maintainer scripts nor the binary could run inside it, and debootstrap needs the network. dpkg
runs the maintainer scripts outside the root (--force-script-chrootless, DPKG_ROOT set: ours do
nothing there), registers the files and the conffile in the root's own database, and checks the
Depends against the stanzas of the host's status file for the packages named (the host is the
Debian 12 system the package is for). The installed binary then runs from the root against the
host's libraries: the ones its Depends name, which the test checks against `ldd`.
"""
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import requests

from server_util import REPO, build_dir, free_port

NEEDED = ("cpack", "dpkg", "dpkg-deb", "dpkg-shlibdeps")
pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in NEEDED),
                                reason=f"needs {', '.join(NEEDED)} (dpkg-dev: scripts/install-deps.sh)")


def run(*args, **kw) -> str:
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True, check=False, **kw)
    assert p.returncode == 0, f"{' '.join(map(str, args))} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    return p.stdout


@pytest.fixture(scope="module")
def deb(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("deb")
    config = build_dir() / "CPackConfig.cmake"
    assert config.exists(), f"{config} missing: configure the build first"
    t0 = time.time()
    run("cpack", "-G", "DEB", "--config", config, "-B", out)
    debs = list(out.glob("mla_*_amd64.deb"))
    assert len(debs) == 1, list(out.iterdir())
    assert time.time() - t0 < 60, "cpack took over a minute: did it build?"
    return debs[0]


def depends(deb: Path) -> dict[str, str]:
    """Depends: package -> version constraint ("" for none)."""
    out = {}
    for item in run("dpkg-deb", "-f", deb, "Depends").strip().split(", "):
        m = re.fullmatch(r"([a-z0-9][a-z0-9+.-]+)(?: \((.+)\))?", item)
        assert m, f"unexpected Depends item {item!r}"
        out[m.group(1)] = m.group(2) or ""
    return out


def owner(path: str) -> str:
    """The Debian package that owns a file (merged /usr: dpkg may know it under either name)."""
    for candidate in (path, path.removeprefix("/usr") if path.startswith("/usr/") else "/usr" + path):
        p = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True, check=False)
        if p.returncode == 0:
            return p.stdout.split(":", 1)[0].strip()
    raise AssertionError(f"no Debian package owns {path}")


def test_control_data_and_files(deb):
    assert run("dpkg-deb", "-f", deb, "Package", "Architecture").split() == ["Package:", "mla", "Architecture:",
                                                                            "amd64"]
    conffiles = run("dpkg-deb", "-I", deb, "conffiles").split()
    assert conffiles == ["/etc/default/mla"]
    files = {line.split()[-1] for line in run("dpkg-deb", "-c", deb).splitlines()}
    for want in ("./usr/bin/mla", "./usr/lib/systemd/system/mla-serve.service", "./etc/default/mla",
                 "./usr/share/doc/mla/README.md", "./usr/share/doc/mla/API.md", "./usr/share/doc/mla/copyright",
                 "./usr/share/mla/models/tiny-q8_0.gguf", "./usr/share/mla/grafana/mla-dashboard.json",
                 "./usr/share/mla/templates/deepseek-v4.jinja"):
        assert want in files, f"{want} not in the package: {sorted(files)}"


def host_packages() -> dict[str, str]:
    """The host's installed packages: name -> its stanza of /var/lib/dpkg/status."""
    out = {}
    for stanza in Path("/var/lib/dpkg/status").read_text(encoding="utf-8").split("\n\n"):
        name = re.search(r"^Package: (\S+)$", stanza, re.MULTILINE)
        if name and re.search(r"^Status: install ok installed$", stanza, re.MULTILINE):
            out[name.group(1)] = stanza.strip()
    return out


def provides(stanza: str) -> set[str]:
    """A package's name and the virtual packages it provides."""
    names = {re.search(r"^Package: (\S+)$", stanza, re.MULTILINE).group(1)}
    if m := re.search(r"^Provides: (.+)$", stanza, re.MULTILINE):
        names |= {item.split()[0] for item in m.group(1).split(", ")}
    return names


def satisfiers(dep: str, host: dict[str, str]) -> list[str]:
    """The host packages that satisfy a Depends name (the package itself, or a provider)."""
    return [name for name, stanza in host.items() if dep in provides(stanza)]


def install(deb: Path, root: Path) -> None:
    """dpkg --root into an empty root whose database knows the host's packages that satisfy the
    Depends (so dpkg checks them, versions included)."""
    info = root / "var" / "lib" / "dpkg"
    (info / "info").mkdir(parents=True)
    (info / "updates").mkdir()
    (info / "available").touch()
    host = host_packages()
    kept = set()
    for dep in depends(deb):
        found = satisfiers(dep, host)
        assert found, f"Depends {dep}: no package on this host provides it"
        kept.update(found)
    (info / "status").write_text("\n\n".join(host[name] for name in sorted(kept)) + "\n\n", encoding="utf-8")
    flags = ["--force-script-chrootless", "--log=/dev/null"] + ([] if os.geteuid() == 0 else ["--force-not-root"])
    run("dpkg", f"--root={root}", *flags, "-i", deb)
    status = run("dpkg", f"--root={root}", "-s", "mla")
    assert "Status: install ok installed" in status, status
    assert re.search(r"^Conffiles:\n /etc/default/mla [0-9a-f]{32}$", status, re.MULTILINE), status


def environment_file(path: Path) -> dict[str, str]:
    """systemd's EnvironmentFile syntax, as much as the shipped file uses: NAME=value lines,
    comments, optional quotes."""
    env = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, value = line.split("=", 1)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[name.strip()] = value.strip()
    return env


def unit_command(unit: Path, env: dict[str, str]) -> list[str]:
    """ExecStart with systemd's substitution: ${NAME} is one word, $NAME splits on whitespace."""
    lines = [line for line in unit.read_text(encoding="utf-8").splitlines() if line.startswith("ExecStart=")]
    assert len(lines) == 1, lines
    words = []
    for word in shlex.split(lines[0][len("ExecStart="):]):
        if m := re.fullmatch(r"\$\{(\w+)\}", word):
            words.append(env[m.group(1)])
        elif m := re.fullmatch(r"\$(\w+)", word):
            words.extend(env[m.group(1)].split())
        else:
            words.append(word)
    return words


def test_depends_are_the_packages_of_the_linked_libraries(deb, tmp_path):
    """Each library the binary links directly (its NEEDED entries, resolved as ldd resolves them)
    belongs to a package the Depends name (or to one that provides that name), and each Depends
    item is there for one of them."""
    run("dpkg-deb", "-x", deb, tmp_path)
    binary = tmp_path / "usr" / "bin" / "mla"
    ldd = run("ldd", binary)
    assert "not found" not in ldd, ldd
    resolved = dict(re.findall(r"^\s*(\S+) => (/\S+) \(0x", ldd, re.MULTILINE))
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(\S+)\]", run("readelf", "-d", binary))
    assert needed, "no NEEDED entries"
    host = host_packages()
    deps = set(depends(deb))
    used = set()
    for lib in needed:
        path = resolved.get(lib) or next((p for name, p in resolved.items() if name.endswith("/" + lib)), None)
        if path is None and lib.startswith("ld-linux"):
            path = re.search(r"^\s*(/\S*" + re.escape(lib) + r") \(0x", ldd, re.MULTILINE).group(1)
        assert path, f"ldd did not resolve {lib}:\n{ldd}"
        pkg = owner(path)
        named = provides(host[pkg]) & deps
        assert named, f"{lib} ({path}) is in {pkg}, which no Depends item names: {sorted(deps)}"
        used |= named
    assert used == deps, f"Depends items no linked library needs: {sorted(deps - used)}"


def test_installs_into_a_fresh_root_and_serves(deb, tmp_path):
    root = tmp_path / "root"
    install(deb, root)
    unit = root / "usr" / "lib" / "systemd" / "system" / "mla-serve.service"
    text = unit.read_text(encoding="utf-8")
    assert "EnvironmentFile=/etc/default/mla" in text and "ExecStart=/usr/bin/mla serve" in text
    if shutil.which("systemd-analyze"):
        # The unit as systemd reads it (paths moved into the root, so that they exist): no warnings.
        probe = tmp_path / "unit" / "mla-serve.service"
        probe.parent.mkdir()
        probe.write_text(text.replace("=/usr/bin/", f"={root}/usr/bin/").replace("=/etc/", f"={root}/etc/"))
        p = subprocess.run(["systemd-analyze", "verify", str(probe)], capture_output=True, text=True, check=False)
        assert p.returncode == 0 and not p.stderr.strip() and not p.stdout.strip(), p.stdout + p.stderr
    env = environment_file(root / "etc" / "default" / "mla")
    cmd = unit_command(unit, env)
    assert cmd[:4] == ["/usr/bin/mla", "serve", "-m", "/usr/share/mla/models/tiny-q8_0.gguf"], cmd
    # The installed files, from the root; the port is the test's.
    cmd = [str(root) + cmd[0], *cmd[1:3], str(root) + cmd[3], *cmd[4:]]
    port = free_port()
    cmd[cmd.index("--port") + 1] = str(port)
    name = cmd[cmd.index("--served-model-name") + 1]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            assert proc.poll() is None, f"installed mla serve exited {proc.returncode}:\n{proc.stdout.read()}"
            try:
                if requests.get(url + "/health", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert time.time() < deadline, "installed mla serve not ready after 60 s"
            time.sleep(0.1)
        r = requests.post(url + "/v1/completions", timeout=60,
                          json={"model": name, "prompt": "Hello", "max_tokens": 1, "temperature": 0})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["model"] == name and body["choices"][0]["text"] and body["usage"]["completion_tokens"] == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert rc == 0, proc.stdout.read()


def test_cmake_install_puts_each_file_in_its_place(tmp_path):
    """`cmake --install` with another prefix: the unit and the settings name that prefix's paths
    (settings under PREFIX/etc, as GNUInstallDirs does for a prefix other than /usr)."""
    prefix = tmp_path / "opt-mla"
    run("cmake", "--install", build_dir(), "--prefix", prefix)
    unit = (prefix / "lib" / "systemd" / "system" / "mla-serve.service").read_text(encoding="utf-8")
    assert f"EnvironmentFile={prefix}/etc/default/mla" in unit
    assert f"ExecStart={prefix}/bin/mla serve -m ${{MLA_MODEL}} $MLA_ARGS" in unit
    env = environment_file(prefix / "etc" / "default" / "mla")
    assert env["MLA_MODEL"] == f"{prefix}/share/mla/models/tiny-q8_0.gguf"
    assert (prefix / "share" / "mla" / "models" / "tiny-q8_0.gguf").read_bytes() == \
        (REPO / "models" / "tiny-q8_0.gguf").read_bytes()
    assert os.access(prefix / "bin" / "mla", os.X_OK)
    assert (prefix / "share" / "doc" / "mla" / "API.md").exists()
