"""One-off studies: each measured the question behind one past decision (``bench/README.md``, "Studies",
names it). They import the harness in ``bench``; the harness never imports them. Run one as
``python -m bench.studies.<name>``."""
