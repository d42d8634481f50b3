/*
 * liveness.pml: a live job whose owner keeps beating is eventually final, and a replayed
 * micro-batch cannot livelock (writeStream.format("xasink"), xasink/datasource.py).
 *
 * A format("xasink") micro-batch's job is minted before Spark runs anything (mint), waits
 * for upstream stages and for an executor (no task yet), then its tasks, in two waves, each
 * read their first row, write and PREPARE; commit() decides. No driver process lives
 * through the batch: only the tasks beat, and a task's beats end with it. Recovery runs
 * again and again (a cron `xasink recover`, other writers' startup recovery) with the
 * default grace, and aborts a running job it finds silent past its lease (recovery.py
 * _alive). A batch whose job was aborted fails; Spark restarts the query, which replays the
 * batch with a fresh job (a new mint). The Spark driver may also die for good, once: then
 * nobody beats and nothing replays.
 *
 * Time is abstracted into what recovery may see, with the code's leases as the assumptions:
 * a minted job keeps its start lease (xasink.startTimeout, an hour: it holds nothing before a
 * task runs) until its first beat, and upstream stages end within it; every task beats from
 * its first moment, before it reads a row; the gaps without a running task (between waves,
 * after the last task until commit()) are shorter than the running lease
 * (xasink.leaseSeconds). So recovery finds a job silent past its lease only once its owner
 * is dead.
 *
 * A task whose partition fits in xasink.driverWriteBytes ships its rows instead of writing
 * a branch (xasink/spark/shipping.py). Within its job's first heartbeat interval it may send
 * no beat (it ends within that interval, or beats after one); once the job is older than an
 * interval it beats at its start, as a branch's task does, even when it is quick. So such a
 * task leaves the job silent for at most two intervals and a gap, and a lease is at least
 * three intervals (xasink.leaseSeconds is refused below that): the task below stands for
 * both kinds.
 *
 * Checked: a live owner's job is never aborted (assertion), and under weak fairness
 * <> (the batch is committed, or its owner died and the job is aborted): eventually final.
 * Mutant -DMUTANT_LATE_BEAT (the old code): a task beats only once its first row arrived,
 * and the job starts with the running lease, so a slow upstream stage or first row leaves a
 * live job silent past it: an abort of a live job, and replays aborted forever.
 * Mutant -DMUTANT_SILENT_SHIP (the first shipping code): a shipping task beats only once it
 * has read for an interval, so a run of quick ones, after a branch's task set the running
 * lease, may stay silent past it: a live job aborted.
 */

#define J_NONE      0
#define J_RUNNING   1
#define J_COMMITTED 2
#define J_ABORTED   3

byte job = J_NONE;
bit beating;          /* a task of the job beats now (its heartbeat thread runs) */
bit first_beat;       /* the job has beaten: its start lease is replaced by the running one */
bit waiting_row;      /* a task waits for its first row (old code: not beating yet) */
bit dead;             /* the Spark driver died for good */
bit silent_run;       /* MUTANT_SILENT_SHIP: a run of quick shipping tasks, no beat, past the
                         running lease */

#define DIE  if :: !dead -> atomic { dead = 1; beating = 0 }; goto gone :: skip fi

/* One task: beats from its start, reads its first row, writes, PREPAREs (or ships), ends. */
inline task() {
#ifdef MUTANT_SILENT_SHIP
  if
  :: silent_run = 1; DIE; silent_run = 0                   /* quick shipping tasks, no beat */
  :: skip
  fi;
#endif
  atomic {
#ifndef MUTANT_LATE_BEAT
    beating = 1; first_beat = 1;                           /* Heartbeat(beat_now=True) */
#endif
    waiting_row = 1
  }
  DIE;
  atomic { waiting_row = 0; beating = 1; first_beat = 1 }  /* its first row (old: 1st beat) */
  DIE;
  beating = 0                                              /* rows, PREPARE; heartbeat.stop */
}

active proctype Spark() {
  do
  :: atomic { job = J_RUNNING; beating = 0; first_beat = 0 }  /* mint: start lease */
     DIE;                                                     /* upstream stages, a queue */
     task();                                                  /* the first wave */
     DIE;                                                     /* a gap between waves */
     task();                                                  /* the second wave */
     DIE;
     atomic {                                                 /* commit(): decide_commit */
       if
       :: job == J_RUNNING -> job = J_COMMITTED
       :: else                                                /* JobAbortedError: replay */
       fi
     }
     if :: job == J_COMMITTED -> break :: else fi
  od;
gone:
  skip
}

/* Recovery runs, again and again: aborts a running job silent past its lease. With the
   leases above, only a dead owner's job is (the old code: also one that has not beaten
   yet, whatever it waits for). */
#ifdef MUTANT_LATE_BEAT
#define PAST_LEASE  (dead || !first_beat || waiting_row)
#elif defined(MUTANT_SILENT_SHIP)
#define PAST_LEASE  (dead || (first_beat && silent_run))
#else
#define PAST_LEASE  dead
#endif
active proctype Recovery() {
  do
  :: atomic {
       job == J_RUNNING && !beating && PAST_LEASE ->
         assert(dead);                                        /* never a live owner's job */
         job = J_ABORTED
     }
  :: job == J_COMMITTED || (dead && job != J_RUNNING) -> break
  od
}

ltl eventually_final { <> (job == J_COMMITTED || (dead && job == J_ABORTED)) }
