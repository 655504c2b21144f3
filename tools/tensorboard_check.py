#!/usr/bin/env python3
"""Reads strata's TensorBoard event files with the `tensorboard` package's own reader and checks them.

A dev tool (needs `pip install tensorboard`; never a build or test requirement: the test that runs it
skips when the package is missing). For each events.out.tfevents.* file under PATH (a file or a
log directory): every record through TensorBoard's record reader, which checks both masked CRC-32Cs
of each record and raises on a mismatch; every record parsed as TensorBoard's Event protocol
buffer; the first one the file version "brain.Event:2"; then the scalars by tag through
TensorBoard's EventAccumulator (what `tensorboard --logdir` loads). With --metrics FILE (the same
run's `strata train --metrics` file), each step row's loss must equal the i-th
"Train/Samples/train_loss" value (as float32) and the steps must match in number.

Usage: python3 tools/tensorboard_check.py PATH [--metrics FILE]
Exit: 0 all good (prints the tags, counts and last values), 1 a check failed, 2 tensorboard missing.
"""
import argparse
import glob
import json
import os
import struct
import sys


def event_files(path):
    if os.path.isfile(path):
        return [path]
    return sorted(glob.glob(os.path.join(path, "**", "*tfevents*"), recursive=True))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", help="an event file or a log directory")
    parser.add_argument("--metrics", help="the run's --metrics JSON lines file, to compare the losses")
    args = parser.parse_args()
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        from tensorboard.compat.proto import event_pb2
        from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow
    except ImportError as e:
        print(f"tensorboard_check: the tensorboard package is not installed ({e}): pip install tensorboard",
              file=sys.stderr)
        return 2

    files = event_files(args.path)
    if not files:
        print(f"tensorboard_check: no events.out.tfevents.* file under {args.path}", file=sys.stderr)
        return 1
    losses = []
    for f in files:
        reader = pywrap_tensorflow.PyRecordReader_New(f, 0, None, None)
        events = []
        while True:
            try:
                reader.GetNext()
            except errors.OutOfRangeError:
                break
            except errors.DataLossError as e:  # a CRC mismatch or a record cut short
                print(f"tensorboard_check: {f}: record {len(events) + 1}: {e}", file=sys.stderr)
                return 1
            events.append(event_pb2.Event.FromString(reader.record()))
        if not events or events[0].file_version != "brain.Event:2":
            print(f"tensorboard_check: {f}: the first record is not the file version 'brain.Event:2'", file=sys.stderr)
            return 1
        accumulator = EventAccumulator(f, size_guidance={"scalars": 0})
        accumulator.Reload()
        tags = accumulator.Tags()["scalars"]
        print(f"{f}: {len(events)} records")
        for tag in tags:
            scalars = accumulator.Scalars(tag)
            print(f"  {tag:34} {len(scalars):6} values, steps {scalars[0].step}..{scalars[-1].step}, "
                  f"last {scalars[-1].value:.6g}")
        if "Train/Samples/train_loss" in tags:
            losses += [s.value for s in accumulator.Scalars("Train/Samples/train_loss")]

    if args.metrics:
        rows = [r for r in map(json.loads, open(args.metrics)) if "loss" in r and "step" in r]
        as_f32 = [struct.unpack("f", struct.pack("f", r["loss"]))[0] for r in rows]
        if as_f32 != losses:
            print(f"tensorboard_check: the event files' {len(losses)} train_loss values differ from the "
                  f"{len(rows)} step rows of {args.metrics}", file=sys.stderr)
            return 1
        print(f"train_loss: the {len(rows)} steps of {args.metrics}, value for value")
    return 0


if __name__ == "__main__":
    sys.exit(main())
