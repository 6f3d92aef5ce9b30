"""The group's checkpoint during the fit: where a restarted group resumes (an epoch and a step in it), the
chief's state taken by every worker before the first step, a save at each epoch's end and every
`everySteps` steps, and SIGTERM making the group save at the next step and exit 75
(docs/design/checkpoint-stores.md).

The checkpoint holds what Keras' BackupAndRestore holds, under its names (a volume's checkpoint written before
still resumes): the model with its optimizer, the epoch and the last step saved, fit's step counter.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mwms_contract import termination
from mwms_trainer import pid1
from mwms_trainer.checkpoint_store import CHIEF_DIR, Store
from mwms_trainer.errors import RetryableError, TrainerError
from mwms_trainer.tfenv import keras, tensorflow

log = logging.getLogger("mwms_trainer")
EPOCH_VARIABLE = "ckpt_saved_epoch"
BATCH_VARIABLE = "ckpt_saved_batch"


@dataclass(frozen=True)
class ResumePoint:
    """Where the fit starts: the first step to run in `epoch`. `found`: a checkpoint was restored."""

    epoch: int = 0
    step: int = 0
    found: bool = False

    def __str__(self) -> str:
        return f"epoch {self.epoch + 1} step {self.step + 1}"


def resume_point(saved_epoch: int, saved_step: int, steps_per_epoch: int) -> ResumePoint:
    """The step after the one saved. A step below 0 is an epoch-end save of BackupAndRestore's own (it saved
    no step); an epoch below 0, no checkpoint."""
    if saved_epoch < 0:
        return ResumePoint()
    if saved_step < 0 or saved_step >= steps_per_epoch - 1:
        return ResumePoint(saved_epoch + 1, 0, True)
    return ResumePoint(saved_epoch, saved_step + 1, True)


def saved_position(directory: str) -> tuple[int, int]:
    """(epoch, step) of the latest checkpoint in `directory`, (-1, -1) without one."""
    tf = tensorflow()
    path = tf.train.latest_checkpoint(directory)
    if path is None:
        return -1, -1
    saved = {name.split("/")[0]: name for name, _ in tf.train.list_variables(path)}
    epoch = int(tf.train.load_variable(path, saved[EPOCH_VARIABLE])) if EPOCH_VARIABLE in saved else -1
    step = int(tf.train.load_variable(path, saved[BATCH_VARIABLE])) if BATCH_VARIABLE in saved else -1
    return epoch, step


def from_chief(strategy: Any, values: list[Any], is_chief: bool) -> list[Any]:
    """The chief's `values` on every worker: an all-reduce in which the others add zeros (exact)."""
    tf = tensorflow()
    if strategy.num_replicas_in_sync == 1:
        return [tf.convert_to_tensor(v) for v in values]

    def replica_fn() -> Any:
        own = [tf.convert_to_tensor(v) for v in values]
        sent = own if is_chief else [tf.zeros_like(v) for v in own]
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, sent)

    return [strategy.experimental_local_results(r)[0] for r in strategy.run(replica_fn)]


def agree_on_resume(strategy: Any, directory: str, is_chief: bool, steps_per_epoch: int) -> ResumePoint:
    """Where the group resumes, read from the chief's copy (fetched from the store) and told to the others."""
    epoch, step = saved_position(os.path.join(directory, CHIEF_DIR)) if is_chief else (0, 0)
    tf = tensorflow()
    agreed = from_chief(strategy, [tf.constant([epoch, step], tf.int64)], is_chief)[0].numpy()
    return resume_point(int(agreed[0]), int(agreed[1]), steps_per_epoch)


class StopSignal:
    """SIGTERM while the group fits: each step adds every worker's `requested` flag to the gradients'
    all-reduce, so all see the sum at the same step and stop after it (model.py); `agreed` holds it for the
    callback.

    The flag is set from a thread woken by the signal's wakeup fd: a Python handler runs only between
    bytecodes of the main thread, which sits in a tf.function for a whole epoch's call.
    """

    def __init__(self) -> None:
        tf = tensorflow()
        # Plain variables (created outside the strategy's scope): this worker's own.
        self.requested = tf.Variable(0.0, trainable=False, name="mwms_stop_requested")
        self.agreed = tf.Variable(0.0, trainable=False, name="mwms_stop_agreed")
        self._wakeup: tuple[int, int] | None = None
        self._previous_wakeup = -1

    def listen(self, on_sigterm: Callable[[], None]) -> None:
        """From the main thread: SIGTERM sets `requested` (at once) and calls `on_sigterm` (in a thread)."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        self._wakeup = (read_fd, write_fd)
        signal.signal(signal.SIGTERM, lambda *_: None)  # the C handler writes the fd; nothing else to do
        self._previous_wakeup = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)

        def watch() -> None:
            while True:
                try:
                    data = os.read(read_fd, 64)
                except OSError:
                    return
                if not data:
                    return
                if signal.SIGTERM in data and not self.requested.numpy():
                    self.requested.assign(1.0)
                    on_sigterm()

        threading.Thread(target=watch, name="mwms-sigterm", daemon=True).start()

    def stop_listening(self) -> None:
        """From the main thread: SIGTERM ends the process at once again, as outside the fit."""
        if self._wakeup is None:
            return
        signal.set_wakeup_fd(self._previous_wakeup)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.close(self._wakeup[1])  # the watcher's read ends
        self._wakeup = None

    def stopping(self) -> bool:
        return bool(self.agreed.numpy() > 0)


class StoppedAfterSave(RetryableError):
    """SIGTERM: the group saved its checkpoint and stops (exit 75: the operator starts the next group)."""


@dataclass
class Saved:
    """The last checkpoint wholly saved (and, with a store, published)."""

    epoch: int
    step: int

    def __str__(self) -> str:
        return f"epoch {self.epoch + 1} step {self.step + 1}"


class GroupCheckpoint:
    """Builds the Keras callback that keeps the group's checkpoint in `store` (see the module's docstring)."""

    def __init__(
        self,
        *,
        directory: str,
        store: Store,
        is_chief: bool,
        rank: int,
        steps_per_epoch: int,
        every_steps: int | None,
        resume: ResumePoint,
        stop: StopSignal,
        termination_log: str,
    ) -> None:
        self.directory, self.store, self.is_chief, self.rank = directory, store, is_chief, rank
        self.steps_per_epoch, self.every_steps, self.resume = steps_per_epoch, every_steps, resume
        self.stop, self.termination_log = stop, termination_log
        self.saved: Saved | None = Saved(resume.epoch, resume.step - 1) if resume.found else None

    def unfinished(self, why: str) -> str:
        """What a worker says when its SIGTERM save did not end (`why`), and where the next group resumes."""
        last = f"its last complete checkpoint, {self.saved}" if self.saved else "the start (none was saved)"
        return f"{termination.SAVE_UNFINISHED} ({why}); the next group resumes from {last}"

    def on_sigterm(self) -> None:
        """In the signal's thread: keep the note that stays if the save does not end in time, ask PID 1 for
        the grace period, say so."""
        why = "not within the pod's grace period, spec.checkpoint.terminationGracePeriodSeconds"
        termination.write(
            self.termination_log, termination.failure(termination.RETRYABLE, self.unfinished(why))
        )
        granted = pid1.ask_for_grace()
        log.info(
            "worker %d: SIGTERM: the group saves its checkpoint at the next step%s",
            self.rank,
            "" if granted else " (no PID 1 of ours to wait for it)",
        )

    def callback(self) -> Any:
        k, tf = keras(), tensorflow()
        owner = self

        class GroupCheckpointCallback(k.callbacks.Callback):  # type: ignore[name-defined, misc]
            epoch = 0
            call_first_step = 0
            counter_at_call = 0
            since_save = 0

            def on_train_begin(self, logs: Any = None) -> None:
                model = self.model
                with model.distribute_strategy.scope():  # its slots exist to be restored (a no-op if built)
                    model.optimizer.build(model.trainable_variables)
                self.saved_epoch = tf.Variable(-1, dtype=tf.int64, trainable=False, name=EPOCH_VARIABLE)
                self.saved_step = tf.Variable(-1, dtype=tf.int64, trainable=False, name=BATCH_VARIABLE)
                checkpoint = tf.train.Checkpoint(
                    model=model,
                    ckpt_saved_epoch=self.saved_epoch,
                    ckpt_saved_batch=self.saved_step,
                    train_counter=model._train_counter,
                )
                # Created on every worker now (creating a variable is a collective), not by the chief's
                # restore alone.
                checkpoint.save_counter  # noqa: B018
                own = CHIEF_DIR if owner.is_chief else f"workertemp_{owner.rank}"
                self.own_dir = os.path.join(owner.directory, own)
                # Saving runs collectives: every worker saves; only the chief's copy is kept.
                self.manager = tf.train.CheckpointManager(checkpoint, self.own_dir, max_to_keep=1)
                if owner.resume.found:
                    if owner.is_chief:
                        self.manager.restore_or_initialize()
                    state = training_state(model, self.saved_epoch, self.saved_step)
                    started = time.monotonic()
                    for variable, value in zip(
                        state, from_chief(model.distribute_strategy, state, owner.is_chief), strict=True
                    ):
                        variable.assign(value)
                    log.info(
                        "worker %d resumes at %s, the chief's state taken in %.3f s",
                        owner.rank,
                        owner.resume,
                        time.monotonic() - started,
                    )
                model._training_state = self  # fit asks it where to start (maybe_load_initial_counters...)
                owner.stop.listen(owner.on_sigterm)

            def maybe_load_initial_counters_from_ckpt(self, *_: Any, **__: Any) -> tuple[int, int]:
                return owner.resume.epoch, owner.resume.step

            def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
                self.epoch = epoch

            def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
                self.call_first_step = batch
                self.counter_at_call = int(self.model._train_counter.numpy())

            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                ran = int(self.model._train_counter.numpy()) - self.counter_at_call
                last = self.call_first_step + ran - 1
                self.since_save += ran
                if last >= owner.steps_per_epoch - 1:
                    return  # saved in on_epoch_end, once the epoch's metrics are logged
                if owner.stop.stopping():
                    self.save_and_stop(last)
                if owner.every_steps is not None and self.since_save >= owner.every_steps:
                    self.save(last)

            def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
                # This callback comes after the epoch's logger: a group that ends between the two runs this
                # epoch again (its metrics logged twice), never resumes after it with its metrics lost.
                last = owner.steps_per_epoch - 1
                if owner.stop.stopping():
                    self.save_and_stop(last)
                self.save(last)

            def save_and_stop(self, last: int) -> None:
                try:
                    self.save(last)
                except TrainerError as e:
                    raise RetryableError(owner.unfinished(str(e))) from None
                raise StoppedAfterSave(
                    f"{termination.SAVED_ON_STOP} at {owner.saved} ({owner.store.where}); the next group "
                    "resumes there"
                )

            def save(self, last: int) -> None:
                started = time.monotonic()
                self.saved_epoch.assign(self.epoch)
                self.saved_step.assign(last)
                self.manager.save()
                saved = time.monotonic() - started
                if not owner.is_chief:
                    shutil.rmtree(self.own_dir, ignore_errors=True)
                    owner.saved, self.since_save = Saved(self.epoch, last), 0
                    return
                try:
                    owner.store.publish(self.own_dir)
                except RetryableError as e:
                    if owner.stop.stopping():
                        raise
                    # The store is unavailable for now: the fit goes on, the store keeps naming the last
                    # checkpoint it holds whole, and the next save tries again.
                    log.warning("checkpoint at %s not published: %s", Saved(self.epoch, last), e)
                    return
                owner.saved, self.since_save = Saved(self.epoch, last), 0
                log.info(
                    "checkpoint saved at %s in %.3f s (save %.3f s, publish %.3f s)",
                    owner.saved,
                    time.monotonic() - started,
                    saved,
                    time.monotonic() - started - saved,
                )

            def on_train_end(self, logs: Any = None) -> None:
                owner.stop.stop_listening()
                self.model._training_state = None

        return GroupCheckpointCallback()


def training_state(model: Any, *extra: Any) -> list[Any]:
    """The variables a checkpoint restores, each once: the model's, its optimizer's, fit's step counter and
    `extra`; not the metrics' (read across workers, reset each epoch)."""
    tf = tensorflow()
    seen: set[int] = set()
    state = []
    for variable in [*model.variables, *model.optimizer.variables, model._train_counter, *extra]:
        if id(variable) in seen or variable.synchronization == tf.VariableSynchronization.ON_READ:
            continue
        seen.add(id(variable))
        state.append(variable)
    return state
