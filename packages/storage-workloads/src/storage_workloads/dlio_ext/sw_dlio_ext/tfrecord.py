"""TFRecord datasets without NVIDIA DALI.

DLIO 2.0.0's tfrecord generator runs DALI's ``tfrecord2idx`` program after each file, and fails
where DALI is not installed. This generator writes the same records (a ``tf.train.Example``
with the sample bytes under ``image`` and an int64 ``size``), then the index file DALI's
readers use, in DALI's format (:func:`.formats.tfrecord_index`), from the record sizes it
has just written: ``<data_folder>/index/{train,valid}/<file name>.idx``, where DLIO puts it.

Every sample of a file holds ``record_length`` bytes (a value drawn per file around it when
``record_length_stdev`` is set), so a file holds ``num_samples_per_file`` records of the
declared size plus the Example and TFRecord framing (about 40 bytes a record). DLIO's own
generator writes ``int(sqrt(record_length))**2`` bytes a record. The tensorflow data loader
reads the files (``tf.data.TFRecordDataset``); the index is for DALI readers elsewhere.
"""

from __future__ import annotations

import os

import tensorflow as tf
from dlio_benchmark.data_generator.data_generator import DataGenerator
from dlio_benchmark.utils.utility import progress
from sw_dlio_ext._dlio import file_rng, partial_path, replace_into, require_local_storage, sizes_for
from sw_dlio_ext.formats import tfrecord_index


class IndexedTFRecordGenerator(DataGenerator):
    def generate(self) -> None:
        super().generate()
        require_local_storage(self._args, "the tfrecord generator")
        for i in range(self.my_rank, int(self.total_files_to_generate), self.comm_size):
            progress(i + 1, self.total_files_to_generate, "Generating TFRecord data")
            path = self.storage.get_uri(self._file_list[i])
            rng = file_rng(i)
            length = int(sizes_for(self._args, 1, i)[0])
            payloads = []
            tmp = partial_path(path)
            with tf.io.TFRecordWriter(tmp) as writer:
                for _ in range(int(self.num_samples)):
                    example = tf.train.Example(
                        features=tf.train.Features(
                            feature={
                                "image": tf.train.Feature(
                                    bytes_list=tf.train.BytesList(value=[rng.bytes(length)])
                                ),
                                "size": tf.train.Feature(
                                    int64_list=tf.train.Int64List(value=[length])
                                ),
                            }
                        )
                    )
                    serialized = example.SerializeToString()
                    payloads.append(len(serialized))
                    writer.write(serialized)
            folder = "train" if i < self.num_files_train else "valid"
            index_dir = os.path.join(self.data_dir, "index", folder)
            os.makedirs(index_dir, exist_ok=True)
            index = os.path.join(index_dir, os.path.basename(path) + ".idx")
            index_tmp = partial_path(index)
            with open(index_tmp, "w", encoding="ascii") as fh:
                fh.write(tfrecord_index(payloads))
            replace_into(tmp, path)
            replace_into(index_tmp, index)
