# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""What went wrong with privilege escalation (become/sudo), from the error Ansible reported.

A node reached as an admin with sudo (``ansible_user: ops``, ``ansible_become: true``) fails a task
for a sudo reason with one of ansible-core's own messages (connection/ssh.py, the sudo become
plugin) or sudo's words in the module's output. ``become_problem`` tells those apart and gives
the one line a user needs: what is wrong with become on that node, and what to do (the password
through ``-K``/``--ask-become-pass`` or ``--become-password-file``, sudo rights for the admin), never
"make the node reachable". The texts it matches are ansible-core's and sudo's, captured on the lab
(tests/fixtures/become/). Plain Python, no Ansible import.
"""

from __future__ import annotations

import re

PASSWORD_HOW = "-K / --ask-become-pass, or --become-password-file FILE"

# (kind, pattern) in the order they are tried: sudo's own words first (they are the cause), then
# ansible-core's summaries of them
_PATTERNS = (
    ("not_allowed", re.compile(r"is not in the sudoers file|is not allowed to execute|may not run sudo on|"
                               r"is not allowed to run sudo", re.I)),
    ("tty", re.compile(r"a terminal is required|you must have a tty to run sudo|no tty present", re.I)),
    ("no_sudo", re.compile(r"sudo: (?:command )?not found|/bin/sh: \d+: sudo: not found|"
                           r"sudo: No such file or directory", re.I)),
    ("incorrect", re.compile(r"Incorrect (?:sudo|su|become) password|Sorry, try again|"
                             r"\d+ incorrect password attempts?", re.I)),
    ("missing", re.compile(r"Missing (?:sudo|su|become) password|a password is required|"
                           r"Sorry, a password is required", re.I)),
    # not "Timeout (1s)": ansible-core's ssh connection waits 2 + its timeout for sudo's success marker and
    # lowers the wait to 1 s only once ssh's output has ended; that timeout is a connection that ended
    # before sudo answered (a bastion gone, a node lost mid-login), not a sudo that waits (ENDED below)
    ("timeout", re.compile(r"Timeout \((?!1s\))\d+s\) waiting for privilege escalation prompt", re.I)),
)
# the connection ended while Ansible waited for sudo's success marker (see "timeout" above)
ENDED = re.compile(r"Timeout \(1s\) waiting for privilege escalation prompt", re.I)


def become_kind(message):
    """The kind of become failure in MESSAGE (an Ansible error, a module's stderr), or None."""
    text = str(message or "")
    for kind, pattern in _PATTERNS:
        if pattern.search(text):
            return kind
    return None


def become_problem(node, message, user=None, method="sudo"):
    """(cause, fix) for a become failure on NODE, or None when MESSAGE is not one.

    user: the login user that escalates (ansible_user), when known.
    """
    kind = become_kind(message)
    if kind is None:
        return None
    who = user or "the login user"
    method = method or "sudo"
    if kind == "incorrect":
        return ("%s on %s rejected the become password given for %s" % (method, node, who),
                "give %s's %s password (%s); nothing was changed" % (who, method, PASSWORD_HOW))
    if kind == "missing":
        return ("%s on %s asks %s for a password and none was given (or %s may not use %s at all)"
                % (method, node, who, who, method),
                "pass the password with %s; or give %s passwordless %s (NOPASSWD) there, or log in as an "
                "admin who has it (ansible_user)" % (PASSWORD_HOW, who, method))
    if kind == "not_allowed":
        return ("%s may not use %s on %s (not in the sudoers file or no rule for this command)" % (who, method, node),
                "grant %s %s on %s (the sudo group, or a rule in /etc/sudoers.d/), or log in as an admin who "
                "has it (ansible_user)" % (who, method, node))
    if kind == "tty":
        return ("%s on %s wants a terminal (requiretty), which Ansible does not open" % (method, node),
                "drop `Defaults requiretty` for %s in /etc/sudoers.d/ on %s" % (who, node))
    if kind == "no_sudo":
        return ("%s is not installed on %s, so %s cannot become root" % (method, node, who),
                "install it there as root (apt-get install sudo), or log in as root (ansible_user: root) "
                "or set ansible_become_method")
    # timeout: the success marker never came back
    found = re.search(r"Timeout \((\d+)s\)", str(message))
    return ("%s on %s did not confirm within %ss (no success marker in the output): it may be waiting "
            "for a password Ansible did not recognize, or for a terminal"
            % (method, node, found.group(1) if found else "the timeout"),
            "on %s as %s, `sudo -n true` must succeed (NOPASSWD), else pass the password with %s"
            % (node, who, PASSWORD_HOW))
