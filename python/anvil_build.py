"""The SDK's build backend (PEP 517, and PEP 660 for editable installs), so that
`pip install ./python` needs nothing from a package index.

pip builds a package in an isolated environment into which it first installs
what pyproject.toml's build-system.requires names. With setuptools there,
an offline machine fails ("No matching distribution found for setuptools"),
even where Debian's python3-setuptools is installed, since the isolated
environment does not see it. This backend is standard library only and sits
in the tree (backend-path), so requires is empty and nothing is fetched. The
SDK is one pure-Python package without dependencies: a wheel of it is a zip
of anvil/*.py and three metadata files, which is all this writes.

The metadata comes from pyproject.toml's [project] table; the reader below
takes the plain `key = "text"` lines this file has, and refuses what it does
not understand rather than building a wheel that says less than the file.
"""
import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "anvil"
# A fixed time for every member: the same sources make the same archive.
EPOCH = (1980, 1, 1, 0, 0, 0)
KNOWN = ("name", "version", "description", "requires-python")


def _project():
    """[project]'s fields from pyproject.toml, as {key: text}."""
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    out, table = {}, None
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"\[([^\]]+)\]\s*(?:#.*)?", line)
        if m:
            table = m.group(1).strip()
            if table.startswith("project."):
                raise ValueError(f"pyproject.toml:{n}: [{table}]: this backend reads only "
                                 f"[project]'s plain keys")
            continue
        if table != "project":
            continue
        m = re.fullmatch(r'([A-Za-z0-9_-]+)\s*=\s*(?:"([^"\\]*)"|\[\s*\])\s*(?:#.*)?', line)
        if not m or (m.group(2) is None and m.group(1) != "dependencies"):
            raise ValueError(f"pyproject.toml:{n}: {line!r}: this backend reads only "
                             f"key = \"text\" and dependencies = [] in [project] (the SDK is "
                             f"standard library only)")
        if m.group(1) in KNOWN:
            out[m.group(1)] = m.group(2)
    for k in ("name", "version"):
        if k not in out:
            raise ValueError(f"pyproject.toml: [project] has no {k}")
    return out


def _dist(p):
    """The distribution's name as file names write it (PEP 427)."""
    return re.sub(r"[-_.]+", "_", p["name"]).lower() + "-" + p["version"]


def _metadata(p):
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}"]
    if p.get("description"):
        lines.append(f"Summary: {p['description']}")
    if p.get("requires-python"):
        lines.append(f"Requires-Python: {p['requires-python']}")
    return "\n".join(lines) + "\n"


def _sources():
    """The package's files, relative to ROOT, sorted: anvil/**/*.py."""
    out = []
    for d, dirs, files in os.walk(os.path.join(ROOT, PACKAGE)):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        out += [os.path.relpath(os.path.join(d, f), ROOT) for f in files if f.endswith(".py")]
    return sorted(x.replace(os.sep, "/") for x in out)


def _wheel(wheel_directory, members):
    """Writes a wheel of members ([(name, bytes)]) with its dist-info; its file name."""
    p = _project()
    dist = _dist(p)
    info = dist + ".dist-info"
    members = list(members) + [
        (f"{info}/METADATA", _metadata(p).encode()),
        (f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: anvil_build\n"
                          b"Root-Is-Purelib: true\nTag: py3-none-any\n"),
    ]
    record = io.StringIO()
    for name, data in members:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        record.write(f"{name},sha256={digest.decode()},{len(data)}\n")
    record.write(f"{info}/RECORD,,\n")
    members.append((f"{info}/RECORD", record.getvalue().encode()))
    filename = dist + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w",
                         zipfile.ZIP_DEFLATED) as z:
        for name, data in members:
            zi = zipfile.ZipInfo(name, EPOCH)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return filename


def _read(rel):
    with open(os.path.join(ROOT, rel), "rb") as f:
        return f.read()


# ---- the hooks pip calls ----

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, [(rel, _read(rel)) for rel in _sources()])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """`pip install -e ./python`: a wheel holding only a .pth file that puts this
    directory on sys.path, so edits to anvil/ take effect without reinstalling."""
    pth = (ROOT + "\n").encode()
    return _wheel(wheel_directory, [("_" + _dist(_project()).split("-")[0] + ".pth", pth)])


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    dist = _dist(p)
    filename = dist + ".tar.gz"
    files = ["pyproject.toml", os.path.basename(__file__)] + _sources()
    members = [(rel, _read(rel)) for rel in files]
    members.append(("PKG-INFO", _metadata(p).encode()))
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz",
                      format=tarfile.PAX_FORMAT) as t:
        for rel, data in sorted(members):
            ti = tarfile.TarInfo(f"{dist}/{rel}")
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 0
            t.addfile(ti, io.BytesIO(data))
    return filename
