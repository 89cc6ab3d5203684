"""A synthetic dataset in the exact public Yambda layout, with a planted learnable signal.

:func:`synthesize` writes ``<out>/flat/<size>/multi_event.parquet``,
``<out>/artist_item_mapping.parquet`` and ``<out>/album_item_mapping.parquet`` in the public
schema (:mod:`yambda_data.schema`); :func:`synthesize_cached` keeps such a dataset as a cache
that is checked (sha256) at every reuse; :func:`generate` returns the same tables in memory
together with the generator's own listen_plus probability of every listen.

The generative story, vectorized with numpy over blocks of users:

* Catalogue. Items, artists and albums get sparse ids (drawn without replacement from
  ``[0, id_sparsity * count)``). Artists belong to genres; every artist has a taste vector
  (its genre's centroid plus noise) and Zipf-like catalogue size. Every item has one primary
  artist, a primary album of that artist, a Zipf popularity rank, a track length (a multiple of
  5 seconds) and a quality. The mapping files are many-to-many: some items have extra artists
  (from the primary artist's genre, so the genre stays consistent), some are also on a
  compilation album, and a few items have no mapping row at all.
* Users. Listen counts are log-normal (heavy tailed). Each user has a taste vector, a bias and a
  personal library of favourites. A listen picks its item from the library (favourites first),
  from a genre drawn by taste, or from global popularity.
* The planted signal. A listen is listen_plus (played_ratio_pct >= 50) with probability
  ``sigmoid(-0.15 + s * (1.1 * affinity(user, artist) + 0.6 * quality(item) + bias(user)))``,
  where ``affinity`` is the scaled dot product of the user's and the primary artist's taste
  vectors and ``s`` is :attr:`SynthConfig.signal_scale`. Likes follow listen_plus listens of
  liked artists, dislikes follow skips of disliked ones; some likes and dislikes are undone
  (unlike, undislike). :meth:`SynthData.planted_auc` is the Bayes-optimal AUC: the AUC of these
  probabilities against the drawn labels. For the default config (seed 0) it is 0.787 over
  all listens and 0.789 over the test window; a logistic regression on five hand-made
  features of the samples (history rates, item and artist target encodings) reaches about
  0.69 on the test window.
* Time. Listens form sessions (geometric lengths); the time from a listen to the next one is
  the played part of the track (floored to a multiple of 5) plus an occasional pause, so quick
  skips share timestamps with the next event. Sessions are separated by gaps longer than 30
  minutes. Each user's first sessions are spread over ``[start, time_span - 90,000)``
  (the start within the first two days), and the last :attr:`SynthConfig.last_day_sessions`
  sessions fall in the last day (the first of them starts in
  ``[time_span - 85,800, time_span - 57,000)``), so that the temporal
  split's one-day test window holds events of every user.

Rows are sorted by (uid, timestamp); ties keep generation order (a listen, then its reaction,
then the reaction's undo, then the next listen), so the order is deterministic. The same
config gives byte-identical files.
"""

from yambda_data._synth_cache import SYNTH_RECORD_FILE as SYNTH_RECORD_FILE
from yambda_data._synth_cache import check_synthesis_root, synthesize_cached
from yambda_data._synth_config import DAY as DAY
from yambda_data._synth_config import SESSION_GAP as SESSION_GAP
from yambda_data._synth_config import YAMBDA_USERS as YAMBDA_USERS
from yambda_data._synth_config import SynthConfig, SynthPaths, yambda_shape
from yambda_data._synth_generate import SynthData, generate, roc_auc
from yambda_data._synth_write import STREAM_ROW_GROUP_ROWS as STREAM_ROW_GROUP_ROWS
from yambda_data._synth_write import synthesize, write_parquet_atomic

__all__ = [
    "SynthConfig",
    "SynthData",
    "SynthPaths",
    "check_synthesis_root",
    "generate",
    "roc_auc",
    "synthesize",
    "synthesize_cached",
    "write_parquet_atomic",
    "yambda_shape",
]
