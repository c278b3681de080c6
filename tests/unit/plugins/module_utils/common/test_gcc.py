"""GCC toolchain: version parsing on real outputs, the per-distribution plan (EL decision logic is
only testable here: the lab builds Debian images only), package presence parsing."""

from __future__ import annotations

import pytest
from helpers import FIXTURES, REPO

from ansible_collections.provision.cluster.plugins.module_utils.common import gcc as C

CAPTURES = REPO / "tests" / "fixtures" / "toolchains"


def test_parse_gcc_version_real_outputs():
    # Ubuntu 24.04 (h100-node fixture) and Debian 12 (the lab image, captured by `gcc --version`)
    assert C.parse_gcc_version((FIXTURES / "h100-node" / "gcc-version.txt").read_text()) == "13.3.0"
    assert C.parse_gcc_version((CAPTURES / "gcc-version-debian12.txt").read_text()) == "12.2.0"


def test_parse_gcc_version_rhel_style_first_lines():
    # the first-line format Red Hat's GCC prints (package version in the trailing parentheses)
    assert C.parse_gcc_version("gcc (GCC) 11.2.1 20220127 (Red Hat 11.2.1-9)\n") == "11.2.1"
    assert C.parse_gcc_version("gcc (GCC) 4.8.5 20150623 (Red Hat 4.8.5-44)\n") == "4.8.5"
    assert C.parse_gcc_version("") is None


def test_meets():
    assert C.meets("12.2.0", "9") and C.meets("9.1", "9.1") and not C.meets("8.5.0", "9")
    assert not C.meets(None, "9")


def test_os_release():
    assert C.parse_os_release((FIXTURES / "h100-node" / "os-release").read_text()) == \
        ("Debian", "24", "Ubuntu 24.04.3 LTS")
    rocky = 'NAME="Rocky Linux"\nVERSION_ID="8.9"\nID="rocky"\nID_LIKE="rhel centos fedora"\n'
    assert C.parse_os_release(rocky)[:2] == ("RedHat", "8")
    centos7 = 'NAME="CentOS Linux"\nVERSION_ID="7"\nID="centos"\nID_LIKE="rhel fedora"\n'
    assert C.parse_os_release(centos7)[:2] == ("RedHat", "7")


def test_plan_debian_uses_distro_packages():
    plan = C.plan("Debian", "12", "9")
    assert plan["kind"] == "system" and plan["packages"] == ["gcc", "g++", "make"]
    assert plan["env"] == {"env": {}, "path": [], "ld_library_path": [], "source": []}
    assert C.plan("Debian", "22", "13", debian_packages=["gcc-13", "g++-13"])["packages"] == ["gcc-13", "g++-13"]


def test_plan_el7_devtoolset_with_scl_repo():
    plan = C.plan("RedHat", "7", "9")
    assert plan["scl"] == "devtoolset-9"
    assert plan["pre_packages"] == ["centos-release-scl"]
    assert plan["packages"] == ["devtoolset-9-gcc", "devtoolset-9-gcc-c++", "devtoolset-9-binutils", "make"]
    assert plan["enable"] == "/opt/rh/devtoolset-9/enable"
    assert plan["gcc"] == "/opt/rh/devtoolset-9/root/usr/bin/gcc"
    env = plan["env"]
    assert env["path"] == ["/opt/rh/devtoolset-9/root/usr/bin"]
    assert env["ld_library_path"] == ["/opt/rh/devtoolset-9/root/usr/lib64", "/opt/rh/devtoolset-9/root/usr/lib"]
    assert env["env"]["CXX"] == "/opt/rh/devtoolset-9/root/usr/bin/g++"
    assert not any("scl enable" in str(v) for v in env.values())


def test_plan_el8_el9_gcc_toolset():
    el8 = C.plan("RedHat", "8", "11")
    assert el8["scl"] == "gcc-toolset-11" and el8["pre_packages"] == []
    assert el8["enable"] == "/opt/rh/gcc-toolset-11/enable"
    # EL8's system GCC 8 is enough for min 8
    assert C.plan("RedHat", "8", "8")["kind"] == "system"
    # EL9: system GCC 11; min 13 -> gcc-toolset-13
    assert C.plan("RedHat", "9", "11")["packages"] == ["gcc", "gcc-c++", "make"]
    assert C.plan("RedHat", "9", "13")["scl"] == "gcc-toolset-13"
    # forced toolset
    assert C.plan("RedHat", "9", "9", toolset=14)["scl"] == "gcc-toolset-14"


def test_plan_impossible_is_one_line():
    with pytest.raises(ValueError, match="no GCC >= 12 for EL7") as err:
        C.plan("RedHat", "7", "12")
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="gcc-toolset-9 does not exist on EL9"):
        C.plan("RedHat", "9", "9", toolset=9)
    with pytest.raises(ValueError, match="Suse"):
        C.plan("Suse", "15", "9")


def test_missing_packages_real_dpkg_query_output():
    # `dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' gcc g++ make` in a lab node
    out = (CAPTURES / "dpkg-query-gcc.txt").read_text()
    assert C.missing_packages("Debian", ["gcc", "g++", "make"], out) == []
    assert C.missing_packages("Debian", ["gcc", "g++", "make", "gcc-13"], out) == ["gcc-13"]
    assert C.missing_packages("Debian", ["gcc"], "gcc rc \n") == ["gcc"]
    rpm = "gcc\npackage gcc-toolset-12-gcc is not installed\n"
    assert C.missing_packages("RedHat", ["gcc", "gcc-toolset-12-gcc"], rpm) == ["gcc-toolset-12-gcc"]
    assert C.dpkg_query_argv("/usr/bin/dpkg-query", ["gcc"])[:2] == ["/usr/bin/dpkg-query", "-W"]
