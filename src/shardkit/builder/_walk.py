"""Walking a local folder of samples: what is followed, what is skipped and why.

SRC is untrusted input, so the walk never leaves it and never packs a folder twice:

* real folders are walked first, every class in name order;
* a symbolic link is followed only when its target lies inside SRC. A link to a file
  packs that file under the link's path (and the link's class); a link to a folder is
  walked after every real folder, and only if no walk has reached that folder yet: a link
  back to an enclosing folder (a loop) or to a folder packed from its own place (another
  class, say) is skipped. Links that leave SRC, dangle or loop are skipped with a reason;
* FIFOs, sockets and devices are skipped with their kind (never opened: a read from a
  FIFO blocks forever), and so are folders that cannot be listed (``chmod 000``).

In the class layout (the default) SRC's subfolders are the classes; in the samples layout
(:meth:`FolderWalk.walk_all`) SRC itself is walked, with no class. Every skip is reported as
``(path relative to SRC, reason)``. Names starting with ``.`` are ignored, as before.
The order of the walk is fixed (sorted names), so the same tree
always gives the same listing.
"""

from __future__ import annotations

import operator
import os
import stat
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from ._sources import SkippedItems

__all__ = ["Found", "FolderWalk", "file_kind"]


class Found(NamedTuple):
    """One file: its class ('' with no classes), its path relative to SRC, its size and
    mtime (ns).

    Only what the listing needs is kept: a whole ``os.stat_result`` is ~0.5 KB per file.
    A sink gets the same four values as a plain tuple (what a spill file can hold)."""

    cls: str
    rel: str
    size: int
    mtime_ns: int


#: What a sink receives: the files of one folder, each ``(class, rel, size, mtime_ns)``.
Files = list[tuple[str, str, int, int]]
Dir = tuple[str, str]  # a folder's path, and its path relative to SRC


_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a folder"),
)


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, in words (``"a FIFO"``)."""
    return next((name for test, name in _KINDS if test(mode)), "an unknown kind of file")


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


class FolderWalk:
    """The files of ``root/<class>/**`` (or ``root/**``) under the rules of the module
    docstring.

    ``classes`` and ``found`` hold the result, ``skipped`` what was left out (a list, or
    the :class:`~shardkit.builder._skipped.SkippedLog` given: bounded memory however many
    files are skipped). ``problem(name)`` returns the reason to skip a file by its name,
    or ``""``; it must depend on the name's text after its first dot only (the extension:
    the walk asks it once per extension). With ``sink``, the files of each folder are
    passed to it as that folder is read (:data:`Files`), instead (``found`` stays empty).
    """

    def __init__(
        self,
        root: str,
        problem: Callable[[str], str],
        sink: Callable[[Files], None] | None = None,
        skipped: SkippedItems | None = None,
    ) -> None:
        self.root = root
        self._problem = problem
        self._problems: dict[str, str] = {}  # extension -> problem(name)
        self.real_root = os.path.realpath(root)
        self.classes: list[str] = []
        self.found: list[Found] = []
        self._sink = sink if sink is not None else self._keep
        self.skipped: SkippedItems = skipped if skipped is not None else []
        self._visited: set[tuple[int, int]] = set()
        self._links: deque[tuple[str, str, str]] = deque()  # path, rel, class

    def top(self) -> list[os.DirEntry[str]]:
        """SRC's own entries (OSError when SRC cannot be listed)."""
        with os.scandir(self.root) as scan:
            return sorted((e for e in scan if not e.name.startswith(".")), key=_name)

    def walk(self, entries: list[os.DirEntry[str]]) -> None:
        """Walk every class (``entries`` from :meth:`top`)."""
        self._visited.add(_identity(os.stat(self.root)))
        class_links = []
        for entry in entries:
            if entry.is_symlink():
                class_links.append(entry)
            elif entry.is_dir(follow_symlinks=False):
                self.classes.append(entry.name)
                self._folder(entry.path, entry.name, entry.name)
            else:
                self.skipped.append((entry.name, "not inside a class folder"))
        for entry in class_links:  # after the real folders: a real class wins over a link
            if not entry.is_dir():  # follows the link
                broken = not os.path.exists(entry.path)
                reason = "broken symbolic link" if broken else "not inside a class folder"
                self.skipped.append((entry.name, reason))
            elif self._followed_folder(entry.path, entry.name):
                self.classes.append(entry.name)
                self._folder(entry.path, entry.name, entry.name)
        self._followed_links()
        self.classes.sort()

    def walk_all(self) -> None:
        """Walk SRC itself, every file with no class (the samples layout)."""
        self._folder(self.root, "", "")
        self._followed_links()

    def _followed_links(self) -> None:
        """Walk the folder links found so far, after every real folder."""
        while self._links:
            path, rel, cls = self._links.popleft()
            if self._followed_folder(path, rel):
                self._folder(path, rel, cls)

    def _keep(self, files: Files) -> None:
        self.found.extend(Found._make(file) for file in files)

    def _folder(self, path: str, rel: str, cls: str) -> None:
        """Walk a folder and its real subfolders (a stack, not recursion: any depth)."""
        stack = [(path, rel)]
        while stack:
            path, rel = stack.pop()
            try:
                identity = _identity(os.stat(path))
                if identity in self._visited:  # a bind mount of a folder walked already
                    self.skipped.append((rel, "the same folder as one packed already"))
                    continue
                self._visited.add(identity)
                with os.scandir(path) as scan:
                    entries = sorted((e for e in scan if not e.name.startswith(".")), key=_name)
            except OSError as exc:
                self.skipped.append((rel, f"cannot list the folder: {_reason(exc)}"))
                continue
            stack.extend(reversed(self._entries(entries, rel, cls)))  # name order

    def _entries(self, entries: list[os.DirEntry[str]], rel: str, cls: str) -> list[Dir]:
        """Take a folder's files (passed to the sink together) and links; returns its real
        subfolders. Once per file: a regular file (known from the folder's listing, no
        system call) costs one ``lstat`` and a dictionary look-up of its extension."""
        folders: list[Dir] = []
        files: Files = []
        problems, skipped = self._problems, self.skipped
        head = f"{rel}/" if rel else ""
        for entry in entries:
            name = entry.name
            if not entry.is_file(follow_symlinks=False):  # a folder, a link, a FIFO...
                if entry.is_symlink():
                    self._link(entry.path, head + name, cls)
                elif entry.is_dir(follow_symlinks=False):
                    folders.append((entry.path, head + name))
                else:
                    self._file(entry, head + name, cls)
                continue
            ext = name.partition(".")[2]
            problem = problems.get(ext)
            if problem is None:
                problem = problems[ext] = self._problem(name)
            if problem:
                skipped.append((head + name, problem))
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError as exc:
                skipped.append((head + name, f"cannot stat: {_reason(exc)}"))
                continue
            if not stat.S_ISREG(info.st_mode):  # replaced since the folder was read
                skipped.append((head + name, f"not a regular file ({file_kind(info.st_mode)})"))
                continue
            files.append((cls, head + name, info.st_size, info.st_mtime_ns))
        if files:
            self._sink(files)
        return folders

    def _link(self, path: str, rel: str, cls: str) -> None:
        """A link inside a class: files are decided now, folders after the real ones."""
        try:
            info = os.stat(path)
        except OSError as exc:
            self.skipped.append((rel, f"broken symbolic link: {_reason(exc)}"))
            return
        if stat.S_ISDIR(info.st_mode):
            self._links.append((path, rel, cls))
        elif self._inside(path, rel):
            self._file(path, rel, cls)

    def _followed_folder(self, path: str, rel: str) -> bool:
        """Whether the folder link at ``path`` is walked (else it is reported skipped)."""
        try:
            info = os.stat(path)
        except OSError as exc:
            self.skipped.append((rel, f"broken symbolic link: {_reason(exc)}"))
            return False
        if not self._inside(path, rel):
            return False
        if _identity(info) in self._visited:
            target = os.path.realpath(path)
            here = os.path.realpath(os.path.dirname(path))
            if here == target or here.startswith(target.rstrip(os.sep) + os.sep):
                reason = "symbolic link loop (it points to a folder that encloses it)"
            else:
                reason = "symbolic link to a folder that is packed already: " + self._show(target)
            self.skipped.append((rel, reason))
            return False
        return True

    def _inside(self, path: str, rel: str) -> bool:
        target = os.path.realpath(path)
        if target == self.real_root or target.startswith(self.real_root.rstrip(os.sep) + os.sep):
            return True
        self.skipped.append((rel, "symbolic link leads outside the source folder"))
        return False

    def _show(self, target: str) -> str:
        return os.path.relpath(target, self.real_root).replace(os.sep, "/")

    def _file(self, file: os.DirEntry[str] | str, rel: str, cls: str) -> None:
        """A file (a DirEntry that is no link, or the path of a link to follow)."""
        problem = self._problem(rel.rpartition("/")[2])
        if problem:
            self.skipped.append((rel, problem))
            return
        try:
            info = os.stat(file) if isinstance(file, str) else file.stat(follow_symlinks=False)
        except OSError as exc:
            self.skipped.append((rel, f"cannot stat: {_reason(exc)}"))
            return
        if not stat.S_ISREG(info.st_mode):
            self.skipped.append((rel, f"not a regular file ({file_kind(info.st_mode)})"))
            return
        self._sink([(cls, rel, info.st_size, info.st_mtime_ns)])


_name: Callable[[os.DirEntry[str]], str] = operator.attrgetter("name")  # a C call per entry


def _identity(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino
