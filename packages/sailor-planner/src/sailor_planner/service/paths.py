"""Which server files a client may name: the planner server's data roots (issue 24, item 4).

A request names files three ways: ``profile_dir``, ``sailor_root`` and a model given as the path
of a Hugging Face ``config.json``. The server reads them only inside the folders it was started
with (``serve --data-root DIR``, repeatable); with none, it reads no path a client names.
Models travel by catalog name or by content (``Job.to_proto`` sends a non-catalog spec as the
JSON of its fields), so a client never needs a server path for them.

The check is made on the resolved path (symlinks and '..' followed) *before* anything is
opened, and its error is the same whether the path exists or not, so a client learns nothing
about files outside the roots.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sailor_sim import catalog_model

from ..errors import RequestError


@dataclass(frozen=True)
class DataRoots:
    """Folders whose files (and sub-folders) requests may name; empty = none."""

    roots: tuple[Path, ...] = ()

    @classmethod
    def of(cls, folders) -> DataRoots:
        """Roots from the ``--data-root`` values; each must be an existing folder."""
        resolved = []
        for folder in folders or ():
            path = Path(folder).expanduser()
            if not path.is_dir():
                raise RequestError(f"{folder} is not a folder", field="--data-root")
            resolved.append(path.resolve())
        return cls(tuple(resolved))

    def confine(self, name: str, field: str) -> str:
        """``name`` resolved, if it lies inside a root; else RequestError naming only ``field``
        (never whether the path exists)."""
        if "\x00" not in name and self.roots:
            path = Path(os.path.abspath(name)).resolve()
            if any(path == root or path.is_relative_to(root) for root in self.roots):
                return str(path)
        where = "its --data-root folders" if self.roots else "none (no --data-root given)"
        raise RequestError(
            f"names a server path outside the folders this server reads ({where}); use a "
            "folder under a data root, or send the content instead",
            field=field,
        )

    def model(self, name: str) -> str:
        """A job's model as the server may load it: a catalog name or JSON content as sent; a
        path only inside a root."""
        if not name or name.lstrip().startswith("{") or catalog_model(name) is not None:
            return name
        try:
            return self.confine(name, "job.model")
        except RequestError:
            raise RequestError(
                f"unknown model {name[:60]!r}{'...' if len(name) > 60 else ''}; send a catalog "
                "model name, or the model's content (PlannerClient sends any other model by "
                "content); server paths are read only under the server's --data-root",
                field="job.model",
            ) from None

    def request(self, msg):
        """A copy of a wire request (Plan, Simulate or Replay: fields ``job``, ``profile_dir``,
        ``sailor_root``) with every client-named path confined."""
        out = type(msg)()
        out.CopyFrom(msg)
        out.job.model = self.model(out.job.model)
        out.profile_dir, out.sailor_root = self.profiles(out.profile_dir, out.sailor_root)
        return out

    def profiles(self, profile_dir: str, sailor_root: str) -> tuple[str, str]:
        """The request's profile source, each confined (empty = the built-in profiles)."""
        return (
            self.confine(profile_dir, "profile_dir") if profile_dir else "",
            self.confine(sailor_root, "sailor_root") if sailor_root else "",
        )
