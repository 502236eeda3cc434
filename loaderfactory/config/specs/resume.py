"""The ``resume`` section: how strictly a saved state's config must match the loader's."""

from __future__ import annotations

from loaderfactory.config.specs.base import Spec


class ResumeSpec(Spec):
    """How ``Loader.load_state_dict`` compares the config a state was saved with to the loader's.

    Every field that shapes the batches must match; where the data lives may differ (each kind's
    ``location_fields``, such as tensor_folder's ``root``, and a ``_target_``'s path-like arguments):
    such a state loads with a ``ResumeWarning`` naming each location, saved and now, as long as the
    dataset's kind and length match.
    """

    strict: bool = False
    """Refuse a state whose data location differs too, as any other difference."""
    locations: list[str] = []
    """More config paths that only say where the data lives (`dataset._args_.0`): they may differ too."""
    mixture_changes: bool = False
    """Resume a mixture whose weights, schedule or sources changed, from the saved position, with a
    ResumeWarning naming each change (refused otherwise)."""
