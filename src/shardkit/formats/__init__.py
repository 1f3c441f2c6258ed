"""On-disk shard formats: WebDataset tar and TFRecord (with tf.train.Example)."""
