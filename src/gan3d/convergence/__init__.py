"""The convergence study of notebook 02: N workers against one with error bars over seeds, local
SGD's synchronisation frequency, and learning-rate rules for large global batches.

* :mod:`.plan` - the runs, their configurations, the numbers kept, the code hash;
* :mod:`.study` - running them (resumable) into the committed results file;
* :mod:`.analysis` - the equivalence test and the communication saved, and their tables;
* :mod:`.readings` - what notebook 02 says of its runs and of the warm-start study;
* :mod:`.verify` - keeping the results current across code changes shown to move no number.
"""
