/*
 * sink.pml: a streaming sink's batches, on top of the per-job protocol of xasink.pml.
 *
 * One batch B of one sink, written by two jobs J[0] and J[1] at the same time: a replay by a
 * restarted query while the old run is still alive, or two queries sharing a sink_id. The
 * sink's mark starts at B-1 (the previous batch is committed). Each job is one write_xa call
 * with sink_id/batch_id (xasink/api.py, sinks.py, journal.py). Recovery R runs concurrently.
 * Once all have stopped, a fault-free recovery runs, and then a third job J[2] replays B
 * unless a run reported the batch done (Spark then records it in its commit log and never
 * runs it again).
 *
 * The per-job protocol (branches, phase 2, markers) is proved in xasink.pml; here a job's
 * phase 2 and finish are one step, and what this model adds is the sink's mark:
 *   - decided_already (sinks.py): read the mark; if it reached B, finish its job first, then
 *     report SKIPPED only if that job is committed;
 *   - decide_commit (journal.py): job RUNNING -> COMMITTING and mark B-1 -> B in one local
 *     transaction, only if the mark is below B (else BATCH_TAKEN, nothing changes);
 *   - a decided job that ends ABORTED (a refused staged apply, Journal.abandon, `xasink
 *     resolve --abandon`) puts the mark back in the same transaction (restore_sink).
 *
 * -DCHECK_AFTER_BEGIN: the job exists before the mark is read (writeStream.format("xasink"),
 * xasink/datasource.py), so a replay's own job is cancelled after the check.
 * Spark writes its commit log after the sink returns, so the final replay may come even
 * after a run reported B done (a crash in between); it must then be skipped. -DPRUNE adds
 * an operator's `xasink prune` before the replay (it only deletes jobs that ended longer
 * ago than the grace): it deletes final jobs' rows, never the job the sink's mark names.
 * Switches: -DMUTANT_NO_CONDITION (the decision ignores the mark), -DMUTANT_NO_RESTORE (an
 * abort after the decision leaves the mark), -DMUTANT_SKIP_UNFINISHED (a replay skips a
 * decided batch without finishing it), -DMUTANT_PATH_SINK (the old format("xasink") sink id:
 * the checkpoint path's text, which a restart may spell another way, so the replay finds a
 * sink without a mark), -DMUTANT_PRUNE_MARK (prune deletes the mark's job too, and a replay
 * that finds no row for it fails instead of skipping).
 */

#define NJ 3                      /* J[0], J[1] concurrent; J[2] the final replay */

#define J_NONE       0
#define J_RUNNING    1
#define J_COMMITTING 2
#define J_COMMITTED  3
#define J_ABORTED    4
#define J_GONE       5            /* the row was pruned (the job was final) */

#define A_NONE     0              /* crashed, or an error that claims nothing */
#define A_WRITTEN  1              /* WriteResult: the batch committed by this job */
#define A_SKIPPED  2              /* WriteResult(skipped=True): the batch is in the table */
#define A_CONFLICT 3              /* SinkConflictError: another job committed the batch */
#define A_FAILED   4              /* an error saying the target is unchanged */

#define NOBODY 255

byte job[NJ];                     /* xasink_jobs.state */
byte answer[NJ];
byte mark = 0;                    /* xasink_sinks.batch_id: 0 = B-1, 1 = B */
byte mark_job = NOBODY;           /* xasink_sinks.job_id */
byte applied = 0;                 /* how many jobs' rows of batch B reached the target */
bit refusable = 1;                /* the target may refuse one apply (a staged mode) */
bit final_phase = 0;
bit replayed_done;                /* ghost: the final replay came after a run reported B done */

#define CRASH  if :: !final_phase -> goto dead :: skip fi

/* Journal.finish (COMMITTING -> COMMITTED with the apply in one transaction), or the
 * target refuses the apply: finish_or_refuse -> abandon (-> ABORTED, mark restored). */
inline finish(j) {
  atomic {
    if
    :: job[j] == J_COMMITTING ->
         if
         :: job[j] = J_COMMITTED; applied++
         :: refusable && !final_phase ->
              refusable = 0;
              job[j] = J_ABORTED;
#ifndef MUTANT_NO_RESTORE
              if :: mark_job == j -> mark = 0; mark_job = NOBODY :: else fi
#endif
         fi
    :: else
    fi
  }
}

/* One recovery pass over job j: a decided job is rolled forward whatever its heartbeat; a
 * running one is aborted once silent (always possible while its driver may be dead). */
inline recover(j) {
  if
  :: job[j] == J_COMMITTING -> finish(j)
  :: atomic { job[j] == J_RUNNING -> job[j] = J_ABORTED }
  :: else
  fi
}

proctype J(byte me) {
  byte seen, owner, st;

#ifdef CHECK_AFTER_BEGIN
  /* format("xasink") streaming: the job is registered when the write side's writer is
     pickled, before anyone knows the batch id; commit() checks the mark afterwards */
  job[me] = J_RUNNING;
  CRASH;
#endif
  /* write_xa / commit() -> decided_already */
  atomic { seen = mark; owner = mark_job }
#ifdef MUTANT_PATH_SINK
  if :: me == 2 -> seen = 0 :: else fi;              /* another sink: no mark yet */
#endif
  if
  :: seen == 1 ->
       CRASH;
       st = job[owner];
#ifndef MUTANT_SKIP_UNFINISHED
       if :: st == J_COMMITTING -> finish(owner) :: else fi;   /* resolve_in_doubt(job=...) */
       CRASH;
       st = job[owner];
       if
       :: st == J_COMMITTED -> answer[me] = A_SKIPPED
#ifndef MUTANT_PRUNE_MARK
       :: st == J_GONE -> answer[me] = A_SKIPPED     /* a mark's job is final, not aborted */
#endif
       :: else -> answer[me] = A_NONE                /* CommitError: run xasink recover */
       fi;
#ifdef CHECK_AFTER_BEGIN
       CRASH;
       atomic { if :: job[me] == J_RUNNING -> job[me] = J_ABORTED :: else fi }  /* cancel */
#endif
#else
       answer[me] = A_SKIPPED;
#endif
       goto dead
  :: else
  fi;
#ifndef CHECK_AFTER_BEGIN
  CRASH;
  job[me] = J_RUNNING;                               /* begin_job; branches prepare */
#endif
  CRASH;
  /* _decide -> decide_commit, one local transaction */
  atomic {
    if
    :: job[me] == J_RUNNING ->
#ifndef MUTANT_NO_CONDITION
         if
#ifdef MUTANT_PATH_SINK
         :: me == 2 -> job[me] = J_COMMITTING; st = 1  /* the other sink's mark moves */
#endif
         :: mark == 0 -> mark = 1; mark_job = me; job[me] = J_COMMITTING; st = 1
         :: else -> st = 2                           /* BATCH_TAKEN: rolled back */
         fi
#else
         mark = 1; mark_job = me; job[me] = J_COMMITTING; st = 1
#endif
    :: else -> st = 0                                /* JOB_ENDED: aborted by recovery */
    fi
  }
  if
  :: st == 1
  :: st == 2 ->
       CRASH;
       atomic { if :: job[me] == J_RUNNING -> job[me] = J_ABORTED :: else fi }  /* _abort */
       answer[me] = A_CONFLICT;
       goto dead
  :: st == 0 -> answer[me] = A_FAILED; goto dead    /* JobAbortedError */
  fi;
  CRASH;
  finish(me);                                        /* phase 2 and finish */
  CRASH;
  st = job[me];
  if
  :: st == J_COMMITTED -> answer[me] = A_WRITTEN
  :: st == J_ABORTED -> answer[me] = A_FAILED        /* refused: target unchanged */
  :: else -> answer[me] = A_NONE
  fi;
dead:
  skip
}

#ifdef PRUNE
/* `xasink prune`: deletes final jobs' rows; never the mark's job (jobs.prune). */
#ifdef MUTANT_PRUNE_MARK
#define PRUNABLE(j) 1
#else
#define PRUNABLE(j) (mark_job != (j))
#endif
proctype P() {
  byte j = 0;
  do
  :: j < NJ ->
       atomic {
         if
         :: (job[j] == J_COMMITTED || job[j] == J_ABORTED) && PRUNABLE(j) -> job[j] = J_GONE
         :: else
         fi
       }
       j++
  :: j < NJ -> j++
  :: j == NJ -> break
  od
}
#endif

proctype R() {
  byte j = 0;
  do
  :: j < NJ -> recover(j); j++
  :: j < NJ -> goto dead                             /* crashed */
  :: j == NJ -> break
  od;
dead:
  skip
}

init {
  byte j;
  job[2] = J_NONE;
  atomic {
    run J(0);
    run J(1);
    run R()
  }
  (_nr_pr == 1);                                     /* everyone stopped (or crashed) */
#ifdef PRUNE
  /* prune keeps every job that ended within the grace: it can only delete jobs whose end
     is long past, which is after everything above, and before a restart's replay */
  run P(); (_nr_pr == 1);
#endif
  final_phase = 1;
  /* The final recovery (fault-free), then the final replay of B (Spark runs it until a
   * run reports it done; a fresh job id). */
  j = 0;
  do :: j < NJ -> recover(j); j++ :: else -> break od;
  /* Spark replays the batch (with a new job) until a run reported it done, and may replay
     it once more after that: its commit log is written only after the sink returned */
  if
  :: answer[0] != A_WRITTEN && answer[0] != A_SKIPPED &&
     answer[1] != A_WRITTEN && answer[1] != A_SKIPPED -> run J(2); (_nr_pr == 1)
  :: else ->
       if
       :: replayed_done = 1; run J(2); (_nr_pr == 1)
       :: skip
       fi
  fi;
  /* a replay, fault-free, is answered: written, or skipped as done (never an error that
     Spark would meet again on every restart) */
  assert(!replayed_done || answer[2] == A_SKIPPED);
  /* exactly once: batch B's rows reached the target exactly once */
  assert(applied == 1);
  /* the mark says B exactly when a job of B is committed, and names it */
  assert(mark == 1 && mark_job != NOBODY
         && (job[mark_job] == J_COMMITTED || job[mark_job] == J_GONE));
  j = 0;
  do
  :: j < NJ ->
       /* honest answers: WRITTEN only for the committed job; CONFLICT only when another
          job decided B; SKIPPED only when the batch is in */
       assert(answer[j] != A_WRITTEN || (job[j] == J_COMMITTED && mark_job == j));
       assert(answer[j] != A_CONFLICT || (mark_job != j && job[j] != J_COMMITTED));
#ifndef CHECK_AFTER_BEGIN
       assert(answer[j] != A_SKIPPED || job[j] == J_NONE);
#else
       assert(answer[j] != A_SKIPPED || job[j] == J_ABORTED || job[j] == J_RUNNING);
#endif
       assert(job[j] != J_COMMITTED || mark_job == j);
       j++
  :: else -> break
  od
}
