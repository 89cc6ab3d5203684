"""The sample store: a memory-mapped, per-user columnar copy of the preprocessed events from
which DLRMv4 samples are cut at read time.

``build_store(preprocessed, raw_root, out_dir, min_history=...)`` reads the outputs of
:func:`yambda_data.preprocess.preprocess` one uid partition at a time and writes flat binary
arrays (little-endian, shapes and dtypes in ``manifest.json``):

================================  =========  =================================================
file                              dtype      content
================================  =========  =================================================
``user_uid``                      uint32     [U] uid of every stored user, increasing
``user_offset``                   int64      [U+1] first event of each user in the event arrays
``event_timestamp``               uint32     [E] per user: train events, then test events
``event_item_id``                 uint32     [E]
``event_action``                  uint8      [E] listen_plus 1, like 2, skip 4, else 0
``event_is_organic``              uint8      [E]
``pool_<p>_position``             uint32     [P] positions (within the user) of pool ``p``
``pool_<p>_offset``               int64      [U+1] per user, into ``pool_<p>_position``
``train_anchor``                  int64      [A] event index of every train anchor, grouped by
                                             window (then by user and time)
``train_window_offset``           int64      [W+1] window ``w`` is
                                             ``train_anchor[offset[w]:offset[w + 1]]``
``test_anchor``                   int64      [T] event index of every test anchor
``item_artist_id``                uint32     artist feature per item id (id + 1, 0 = none)
``item_album_id``                 uint32     album feature per item id (id + 1, 0 = none)
================================  =========  =================================================

with pools ``listen_plus``, ``like`` and ``skip`` (the three kinds of history events). A user's
stream is the user's train events followed by the user's test events (the split puts every test
event after every train event of the same user), which is exactly the stream of
:func:`yambda_data.samples.build_samples` for train anchors (train events alone) and test
anchors (train events, then earlier test events). Anchors are the listens with at least
``min_history`` earlier events of the user; train anchors come from train events and test
anchors from test events. Windows: ``window_seconds``-wide bins of train anchor time, counted
from the earliest train anchor.

Reading a sample costs a few binary searches and a gather of its history: the pool arrays lead
straight to the last ``k`` events of each pool inside the causal window, so the cost grows with
the history length, not with the causal window or the user's event count. The history strategy
(:attr:`~yambda_data.samples.SampleConfig.strategy`, interleaved by default), the history
length and the causal window are applied when reading, so one store serves every
:class:`~yambda_data.samples.SampleConfig` with its ``min_history``.

Integrity and concurrency:

* Everything is written into a temporary sibling directory and renamed onto ``out_dir``; the
  ``READY`` marker, holding the sha256 of the manifest, is the last file written, and readers
  refuse a directory without it. The manifest records the sha256 of every array
  (:meth:`SampleStore.verify` recomputes them) and a fingerprint of what the store was built
  from: the settings, the preprocess output's checksum record and the mapping files' sha256.
  A build first checks the preprocess output against its checksum record.
* Builders take an exclusive lock on the sibling file ``.<out_dir>.lock``, so many ranks can
  call :func:`build_store` at once: one builds, the others wait and then open the result. A
  store whose fingerprint matches and whose arrays all match their sha256 is reused
  (re-running is a no-op); any other is rebuilt, ``progress`` naming why; temporary
  directories left by a killed builder are removed under the lock. An ``out_dir`` holding
  anything but the store's own files is never replaced, nor one that is, holds or lies
  inside an input.
* Memory: one preprocess partition at a time, plus the item feature tables.
"""

from yambda_data._readers import StoreInUse, hold_store, writing_store
from yambda_data._store_build import build_store
from yambda_data._store_build import check_store_out as check_store_out
from yambda_data._store_read import (
    ARRAY_FILES,
    MANIFEST_FILE,
    POOLS,
    READY_FILE,
    STORE_FORMAT,
    SampleStore,
    StoreError,
)

__all__ = [
    "ARRAY_FILES",
    "MANIFEST_FILE",
    "POOLS",
    "READY_FILE",
    "STORE_FORMAT",
    "SampleStore",
    "StoreError",
    "StoreInUse",
    "build_store",
    "hold_store",
    "writing_store",
]
