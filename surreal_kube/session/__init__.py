"""Run bookkeeping: checkpoints (`checkpoint`), trackers and timers (`trackers`)."""
