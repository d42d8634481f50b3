/*
 * liveness.pml: a live job whose owner keeps beating is eventually final, and a replayed
 * micro-batch cannot livelock (writeStream.format("xasink"), xasink/datasource.py).
 *
 * A format("xasink") micro-batch's job is minted before Spark runs anything (mint), waits
 * for upstream stages and for an executor (no task yet), then its task reads its first row,
 * writes, and commit() decides. No driver process lives through the batch: only the tasks
 * beat. Recovery runs again and again (a cron `xasink recover`, other writers' startup
 * recovery) with the default grace, and aborts a running job it finds silent past its lease
 * (recovery.py _alive). A batch whose job was aborted fails; Spark restarts the query, which
 * replays the batch with a fresh job (a new mint), forever if need be.
 *
 * Time is abstracted into what recovery may see: a job is "silent past its lease" when no
 * task beats and the lease allows it. The code gives a minted job its start lease
 * (xasink.startTimeout, an hour by default: it holds nothing before a task runs) until the
 * first beat, and every task beats from its first moment, before it reads a row. The
 * assumption behind the start lease: upstream stages end within it.
 *
 * Checked under weak fairness: <> (the batch is committed). Mutant -DMUTANT_LATE_BEAT
 * (the old code): a task beats only once its first row arrived, and the job starts with the
 * short running lease, so every replay can be aborted while it waits: a livelock.
 */

#define J_NONE      0
#define J_RUNNING   1
#define J_COMMITTED 2
#define J_ABORTED   3

byte job = J_NONE;
bit beating;          /* a task of the job beats now (its heartbeat thread runs) */
bit started;          /* a task has started: from now on the job has the running lease */

/* Spark: mint, upstream, the task (beats, first row, rows, PREPARE), commit(); an aborted
   job fails the batch and the restarted query replays it with a fresh job. */
active proctype Spark() {
  do
  :: atomic { job = J_RUNNING; beating = 0; started = 0 }   /* mint: begin_job, start lease */
     skip;                                                  /* upstream stages, a queue */
     atomic {                                               /* the task starts */
       started = 1;
#ifndef MUTANT_LATE_BEAT
       beating = 1                                          /* Heartbeat(beat_now=True) */
#endif
     }
     skip;                                                  /* reading the first row */
     beating = 1;                                           /* (old: the first beat here) */
     skip;                                                  /* rows, marker, PREPARE */
     atomic {                                               /* commit(): decide_commit */
       if
       :: job == J_RUNNING -> job = J_COMMITTED; beating = 0
       :: else -> beating = 0                               /* JobAbortedError: replay */
       fi
     }
     if :: job == J_COMMITTED -> break :: else fi
  od
}

/* Recovery runs, again and again: aborts a running job silent past its lease. Before its
   first task, the job's start lease outlasts upstream stages (the old code had none). */
#ifdef MUTANT_LATE_BEAT
#define PAST_LEASE  1
#else
#define PAST_LEASE  started
#endif
active proctype Recovery() {
  do
  :: atomic { job == J_RUNNING && !beating && PAST_LEASE -> job = J_ABORTED }
  :: job == J_COMMITTED -> break
  od
}

ltl batch_commits { <> (job == J_COMMITTED) }
