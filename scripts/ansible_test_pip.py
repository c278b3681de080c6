"""Let ansible-test make its virtual environments where its pip bootstrap script cannot be downloaded.

ansible-test creates each venv without pip and runs a cached "get-pip" script,
~/.ansible/test/cache/get_pip_<version>.py, which it downloads from its CI file host the first
time. That host is unreachable here (only package registries are), so this writes, for the pip
version the given ansible-test asks for, a small bootstrap of our own in that place: it installs
pip with the interpreter's ensurepip, then the pinned packages ansible-test asked for (pip==X and
friends) from the package index. An existing cached script is left alone.

Usage: python scripts/ansible_test_pip.py   (run with the venv's python that has ansible-core)
"""

from __future__ import annotations

import os
import sys

SHIM = '''# written by provision's scripts/ansible_test_pip.py: pip from ensurepip, then the pinned packages
import subprocess
import sys

args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"], stdout=subprocess.DEVNULL)
subprocess.check_call([sys.executable, "-m", "pip", "install", "-q"] + args)
'''


def main() -> int:
    from ansible_test._internal.python_requirements import get_venv_packages  # noqa: F401
    from ansible_test._internal.host_configs import NativePythonConfig

    python = NativePythonConfig(version="%d.%d" % sys.version_info[:2], path=sys.executable)
    pip_version = get_venv_packages(python)["pip"]
    path = os.path.expanduser("~/.ansible/test/cache/get_pip_%s.py" % pip_version.replace(".", "_"))
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(SHIM)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
