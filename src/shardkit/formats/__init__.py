"""The on-disk vocabulary: WebDataset tar and TFRecord (with tf.train.Example), shard names
and suffixes (:mod:`.names`), ``manifest.json`` (:mod:`.manifest`) and ``.idx`` index files
(:mod:`.index`). Every reader, writer, tool and build path asks these modules."""
