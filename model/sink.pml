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
 *
 * -DONE_PHASE: a job whose single branch the driver writes itself (a small frame, most
 * foreach_batch micro-batches) takes the one-phase path (J1P below): after decided_already
 * and the mark row's registration, ONE local transaction loads the rows (staged: into a
 * temporary stage, applied into the target in the same transaction), inserts the job row
 * born COMMITTED, locks the sink's mark (SELECT ... FOR UPDATE) and moves it to B only if it
 * is below B, and commits. Nothing of the job exists before that commit; a crash before it
 * leaves nothing. A commit whose reply is lost is settled by a fence: an INSERT of the job's
 * row as ABORTED on a fresh connection, which waits on the key of a commit still in flight
 * (duplicate key: it landed). J[0] is one-phase; J[1] and the replay J[2] take either path
 * (two-phase: a larger frame, or a format("xasink") query with -DCHECK_AFTER_BEGIN).
 * One-phase mutants: -DMUTANT_MARK_OUTSIDE (the mark moves in a separate transaction after
 * the commit), -DMUTANT_FENCE_READ (a lost commit reply settled by a plain read of the job
 * row), -DMUTANT_PLAIN_MARK (the mark read inside the transaction without FOR UPDATE, then
 * moved unconditionally), -DMUTANT_TAKEN_SKIPPED (a mark found at B inside the transaction
 * is reported as "skipped, already written" instead of SinkConflictError),
 * -DMUTANT_TAKEN_COMMITS (BATCH_TAKEN returned by commit_in_branch, but the transaction is
 * committed instead of rolled back), -DMUTANT_ERROR_AFTER_COMMIT (an error raised after the
 * commit's reply is reported as "rolled back, nothing written").
 *
 * -DSHIPPED (with -DCHECK_AFTER_BEGIN): a format("xasink") batch whose every partition was
 * shipped to commit() in its task's message (xasink/spark/shipping.py; JS below): the job is
 * minted RUNNING, then commit() checks the mark, registers its row, and runs ONE local
 * transaction: the rows, the job row RUNNING -> COMMITTED only if still running (a recovery
 * may have aborted it as silent), the mark moved only from below B, then COMMIT. A lost
 * reply is settled as an ambiguous decision is: a conditional abort, which waits on the row
 * lock of a commit in flight, then a state read (Journal.fence_decision). J[1] and the replay
 * are shipped batches or two-phase format ones (a partition above the bound). Mutants:
 * -DMUTANT_SHIPPED_UNCONDITIONAL (the job row moved to COMMITTED whatever its state),
 * -DMUTANT_SHIPPED_READ (a lost reply settled by a plain read of the job row).
 *
 * -DONE_PHASE -DOPERATOR: an operator runs `xasink resolve JOB --abandon --table T` (O below)
 * on one-phase jobs that have no row, at any moment (the job id comes from a
 * DecisionUnknownError, but a mistyped id may name a live job): the same fence INSERT, its
 * verdict printed (aborted: run the write again; committed). A one-phase transaction whose
 * job row the fence inserted first fails on the duplicate key. -DMUTANT_OPERATOR_READ: the
 * operator's settle is a plain read (no row: "aborted"), not the fence.
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
bit onep[NJ];                     /* ghost: job j takes the one-phase path */
bit fenced[NJ];                   /* ghost: j's row was inserted ABORTED by its fence */
byte pend = NOBODY;               /* the one-phase job whose COMMIT is in flight: it holds the
                                     mark's row lock and its job row's key until it lands or
                                     is rolled back (DB) */
byte live1p;                      /* one-phase jobs that may still leave a commit in flight */

#define CRASH  if :: !final_phase -> goto dead :: skip fi

/* an answer that says B's rows are in the target (written, skipped as done) is true now */
#define IN_NOW assert(applied > 0)

/* Journal.finish (COMMITTING -> COMMITTED with the apply in one transaction), or the
 * target refuses the apply: finish_or_refuse -> abandon (-> ABORTED, mark restored). */
inline finish(j) {
  atomic {
    if
    :: job[j] == J_COMMITTING ->
         if
         :: job[j] = J_COMMITTED; applied++
         :: refusable && !final_phase && pend == NOBODY ->  /* restore locks the mark */
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
  /* a one-phase job has no row before its commit, and is born final */
  assert(!onep[j] || (job[j] != J_RUNNING && job[j] != J_COMMITTING));
  if
  :: job[j] == J_COMMITTING -> finish(j)
  :: atomic { job[j] == J_RUNNING && pend != j -> job[j] = J_ABORTED }
  :: job[j] == J_RUNNING && pend == j ->             /* a shipped batch's transaction holds
                                                        the row: the abort waits for it */
       atomic { pend != j; if :: job[j] == J_RUNNING -> job[j] = J_ABORTED :: else fi }
  :: else
  fi
}

/* sinks.decided_already: read the mark; at B, finish its job if decided, and report
 * SKIPPED only if it is committed (then stop). `fmt`: the job exists already (format), and
 * is cancelled after the check. */
inline decided_already(me, fmt) {
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
       :: st == J_COMMITTED -> IN_NOW; answer[me] = A_SKIPPED
#ifndef MUTANT_PRUNE_MARK
       :: st == J_GONE -> IN_NOW; answer[me] = A_SKIPPED  /* a mark's job is final, not aborted */
#endif
       :: else -> answer[me] = A_NONE                /* CommitError: run xasink recover */
       fi;
#ifdef CHECK_AFTER_BEGIN
       if
       :: fmt ->
            CRASH;
            atomic { if :: job[me] == J_RUNNING -> job[me] = J_ABORTED :: else fi }  /* cancel */
       :: else
       fi;
#endif
#else
       answer[me] = A_SKIPPED;                       /* (the final asserts catch it) */
#endif
       goto dead
  :: else
  fi
}

/* A two-phase job: write_xa (tasks write the branches), or format("xasink"). */
proctype J(byte me) {
  byte seen, owner, st;

#ifdef CHECK_AFTER_BEGIN
  /* format("xasink") streaming: the job is registered when the write side's writer is
     pickled, before anyone knows the batch id; commit() checks the mark afterwards */
  job[me] = J_RUNNING;
  CRASH;
#endif
  /* write_xa / commit() -> decided_already */
  decided_already(me, 1);
#ifndef CHECK_AFTER_BEGIN
  CRASH;
  job[me] = J_RUNNING;                               /* begin_job; branches prepare */
#endif
  CRASH;
  /* _decide -> decide_commit, one local transaction */
  atomic {
    pend == NOBODY;                                  /* SELECT ... FOR UPDATE of the mark */
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
  :: st == J_COMMITTED -> IN_NOW; answer[me] = A_WRITTEN
  :: st == J_ABORTED -> answer[me] = A_FAILED        /* refused: target unchanged */
  :: else -> answer[me] = A_NONE
  fi;
dead:
  skip
}

#if defined(ONE_PHASE) || defined(SHIPPED)
/* How the one-phase transaction ended (st). */
#define T_DONE    1               /* committed, and the reply arrived */
#define T_TAKEN   2               /* the mark had reached B: rolled back (BATCH_TAKEN) */
#define T_FAILED  3               /* an error before COMMIT (refused rows, a deadlock victim,
                                     a broken connection): rolled back, target unchanged */
#define T_UNKNOWN 4               /* COMMIT sent, no reply: in flight until DB settles it */

#ifdef MUTANT_PLAIN_MARK
#define MARK_FREE (seen == 0)     /* the plain read's (possibly stale) value */
#else
#define MARK_FREE (mark == 0)     /* read under the row lock, held until the commit */
#endif
#define ROW_FREE (job[me] == J_NONE)  /* no job row yet: its INSERT succeeds */

/* The one-phase transaction commits: the rows, the job row born COMMITTED and the mark,
 * all at once. */
inline land(j) {
  assert(job[j] != J_ABORTED);                      /* an ABORTED job is final */
  job[j] = J_COMMITTED;
  applied++;
#ifndef MUTANT_MARK_OUTSIDE
  mark = 1; mark_job = j;
#endif
  pend = NOBODY
}

#ifdef SHIPPED
/* A format("xasink") batch whose every partition was shipped to commit(). */
proctype JS(byte me) {
  byte seen, owner, st;

  job[me] = J_RUNNING;                               /* mint: begin_job */
  CRASH;
  decided_already(me, 1);                            /* commit(): the mark, checked */
  CRASH;
  skip;                                              /* sinkmarks.register (first batch) */
  CRASH;                                             /* rows load inside the transaction */
  /* commit_in_branch(registered=True), then COMMIT: the conditional UPDATE of the job row
     (its row lock held to the commit), the mark's SELECT ... FOR UPDATE and conditional
     move, the winner row; one step for everyone else, as J1P's */
  atomic {
    pend == NOBODY;
    if
    :: !final_phase -> st = T_FAILED                 /* ROLLBACK: WriteError, a refusal */
#ifndef MUTANT_SHIPPED_UNCONDITIONAL
    :: job[me] != J_RUNNING -> st = T_FAILED         /* JobAbortedError: aborted first */
    :: job[me] == J_RUNNING && !MARK_FREE -> st = T_TAKEN
    :: job[me] == J_RUNNING && MARK_FREE -> land(me); st = T_DONE
    :: job[me] == J_RUNNING && MARK_FREE && !final_phase -> pend = me; st = T_UNKNOWN
#else
    :: !MARK_FREE -> st = T_TAKEN
    :: MARK_FREE -> land(me); st = T_DONE
    :: MARK_FREE && !final_phase -> pend = me; st = T_UNKNOWN
#endif
    fi
  }
  if
  :: st == T_DONE -> goto shipped
  :: st == T_TAKEN || st == T_FAILED ->
       CRASH;                                        /* Job.running: abort unless decided */
       atomic { pend != me; if :: job[me] == J_RUNNING -> job[me] = J_ABORTED :: else fi };
       if :: st == T_TAKEN -> answer[me] = A_CONFLICT :: else -> answer[me] = A_FAILED fi;
       goto dead
  :: st == T_UNKNOWN
  fi;
  CRASH;
#ifndef MUTANT_SHIPPED_READ
  /* driver/one_phase.py settle(registered) -> Journal.fence_decision, a fresh connection */
  if
  :: atomic {
       pend != me;                                   /* the conditional abort waits on the
                                                        row lock of the commit in flight */
       if
       :: job[me] == J_RUNNING -> job[me] = J_ABORTED; st = 1
       :: else -> st = 0
       fi
     }
  :: st = 2                                          /* the abort failed otherwise: */
  fi;                                                /* DecisionUnknownError, no read */
  if
  :: st == 1 -> answer[me] = A_FAILED; goto dead     /* JobAbortedError */
  :: st == 2 -> answer[me] = A_NONE; goto dead
  :: else
  fi;
  CRASH;
  st = job[me];                                      /* the state read, after the abort
                                                        changed nothing (no longer running) */
  if
  :: st == J_COMMITTED -> goto shipped
  :: st == J_ABORTED -> answer[me] = A_FAILED; goto dead  /* a recovery's abort came first */
  :: else -> answer[me] = A_NONE; goto dead          /* still in flight: DecisionUnknown */
  fi;
#else
  st = job[me];                                      /* plain read: does not wait */
  if
  :: st == J_COMMITTED -> goto shipped
  :: else -> answer[me] = A_FAILED; goto dead        /* "nothing written" */
  fi;
#endif
shipped:
  CRASH;
  IN_NOW; answer[me] = A_WRITTEN;
dead:
  atomic { live1p--; seen = 0; owner = 0; st = 0 }
}
#endif

#ifdef ONE_PHASE
/* A one-phase job: write_xa whose only branch the driver writes itself. */
proctype J1P(byte me) {
  byte seen, owner, st;

  /* Job.begin: the startup recovery scan (R's), then the mark's one read (replayed) */
  decided_already(me, 0);
  CRASH;
  skip;                                              /* sinkmarks.register (autocommit),
                                                        when that read found no mark row */
  CRASH;                                             /* rows load inside the transaction:
                                                        invisible, gone with a crash */
#ifdef MUTANT_PLAIN_MARK
  seen = mark;                                       /* SELECT without FOR UPDATE */
  CRASH;
#endif
  /* commit_in_branch, then COMMIT, in the code's order: a staged job's apply lock, the job
     row INSERT, lock_apply_order, the mark's SELECT ... FOR UPDATE (waits for a holder)
     and its conditional UPDATE, the winner row, a staged check and apply, the temporary
     stage's DROP. Every lock is held to the commit and a wait ends in proceeding on the
     latest committed state, so these are one step for everyone else; apply.pml runs them
     step by step, with the apply order and lock waits that fail. */
  atomic {
    pend == NOBODY;
    if
    :: !final_phase -> st = T_FAILED                 /* ROLLBACK; InputDataError/WriteError */
    :: !ROW_FREE -> st = T_FAILED                    /* the job row's INSERT: duplicate key
                                                        (an operator's fence came first) */
#ifndef MUTANT_TAKEN_COMMITS
    :: ROW_FREE && !MARK_FREE -> st = T_TAKEN        /* ROLLBACK */
#else
    :: ROW_FREE && !MARK_FREE ->                     /* the caller commits anyway: the rows */
         job[me] = J_COMMITTED; applied++;           /* and the job row, not the mark */
         st = T_TAKEN
#endif
    :: ROW_FREE && MARK_FREE -> land(me); st = T_DONE
    :: ROW_FREE && MARK_FREE && !final_phase ->
         pend = me; st = T_UNKNOWN                   /* LocalCommitUnknown */
    fi
  }
  if
  :: st == T_DONE ->
#ifdef MUTANT_ERROR_AFTER_COMMIT
       /* an error after the commit's reply (the session's setAutoCommit(true) on a broken
          connection, a Spark label's reset) reported as "rolled back, nothing written" */
       if :: !final_phase -> answer[me] = A_FAILED; goto dead :: skip fi;
#endif
       goto written
  :: st == T_TAKEN ->
       CRASH;
#ifdef MUTANT_TAKEN_SKIPPED
       IN_NOW; answer[me] = A_SKIPPED;               /* "another writer just committed it" */
#else
       answer[me] = A_CONFLICT;                      /* conflict_at_decision */
#endif
       goto dead
  :: st == T_FAILED -> answer[me] = A_FAILED; goto dead
  :: st == T_UNKNOWN
  fi;
  CRASH;
#ifndef MUTANT_FENCE_READ
  /* driver/one_phase.py settle -> Journal.fence_one_phase, on a fresh connection */
  if
  :: atomic {
       pend != me;                                   /* INSERT (job, ABORTED) waits on the
                                                        key of the commit in flight */
       if
       :: job[me] == J_NONE -> job[me] = J_ABORTED; fenced[me] = 1;
            if :: st = 1 :: st = 2 fi                /* inserted (its reply may be lost) */
       :: else -> st = 0                             /* duplicate key: it landed */
       fi
     }
  :: st = 2                                          /* the INSERT failed otherwise: a lock
                                                        wait timeout while still in flight,
                                                        a broken connection */
  fi;
  if :: st == 1 -> answer[me] = A_FAILED; goto dead :: else fi;  /* JobAbortedError */
  CRASH;                                             /* the read fails too: DecisionUnknown */
  st = job[me];                                      /* the state read (plain) */
  if
  :: st == J_COMMITTED -> goto written
  :: st == J_ABORTED -> answer[me] = A_FAILED; goto dead  /* our fence row: JobAbortedError */
  :: else -> answer[me] = A_NONE; goto dead          /* no row: DecisionUnknownError */
  fi;
#else
  st = job[me];                                      /* plain read: does not wait */
  if
  :: st == J_COMMITTED -> goto written
  :: else -> answer[me] = A_FAILED; goto dead        /* "nothing written" */
  fi;
#endif
written:
#ifdef MUTANT_MARK_OUTSIDE
  CRASH;
  atomic { pend == NOBODY; if :: mark == 0 -> mark = 1; mark_job = me :: else fi }
#endif
  CRASH;
  IN_NOW; answer[me] = A_WRITTEN;
dead:
  atomic { live1p--; seen = 0; owner = 0; st = 0 }
}

#endif

/* The server settles a one-phase COMMIT in flight: it lands, or it is rolled back (it never
 * arrived, the session was dropped). */
proctype DB() {
  do
  :: atomic { pend != NOBODY -> land(pend) }
  :: atomic { pend != NOBODY -> pend = NOBODY }
  :: atomic { pend == NOBODY && live1p == 0 -> break }
  od
}

#ifdef OPERATOR
#define V_ABORTED   1
#define V_COMMITTED 2
byte verdict[NJ];                 /* what `xasink resolve --table` printed for job j */

/* `xasink resolve JOB --abandon --table T` on each concurrent one-phase job, or not, at any
 * moment: with no row, admin.settle_one_phase -> Journal.fence_one_phase. */
proctype O() {
  byte j = 0;
  do
  :: j < 2 && onep[j] ->
#ifndef MUTANT_OPERATOR_READ
       atomic {
         pend != j;                                  /* the INSERT waits on the key of a
                                                        commit in flight */
         if
         :: job[j] == J_NONE -> job[j] = J_ABORTED; fenced[j] = 1; verdict[j] = V_ABORTED
         :: job[j] == J_COMMITTED -> verdict[j] = V_COMMITTED  /* duplicate key */
         :: else                                     /* another row: not this command */
         fi
       }
#else
       atomic { if :: job[j] == J_NONE -> verdict[j] = V_ABORTED :: else fi }
#endif
       j++
  :: j < 2 -> j++                                    /* not this job */
  :: j == 2 -> break
  od
}
#endif
#ifdef SHIPPED
#define REPLAY  if :: live1p = 1; run JS(2) :: run J(2) fi
#else
#define REPLAY  if :: onep[2] = 1; live1p = 1; run J1P(2) :: run J(2) fi
#endif
#else
#define REPLAY  run J(2)
#endif

#ifdef PRUNE
/* `xasink prune`: deletes final jobs' rows; never the mark's job (jobs.prune). */
byte pruned[NJ];                  /* ghost: the state a pruned row ended in, for the asserts */
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
         :: (job[j] == J_COMMITTED || job[j] == J_ABORTED) && PRUNABLE(j) ->
              pruned[j] = job[j]; job[j] = J_GONE
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
#ifdef SHIPPED
    live1p = 1; run JS(0);
    if :: live1p++; run JS(1) :: run J(1) fi;
    run DB();
#elif defined(ONE_PHASE)
    onep[0] = 1; live1p = 1; run J1P(0);
    if :: onep[1] = 1; live1p++; run J1P(1) :: run J(1) fi;
    run DB();
#ifdef OPERATOR
    run O();
#endif
#else
    run J(0);
    run J(1);
#endif
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
     answer[1] != A_WRITTEN && answer[1] != A_SKIPPED -> atomic { REPLAY }; (_nr_pr == 1)
  :: else ->
       if
       :: replayed_done = 1; atomic { REPLAY }; (_nr_pr == 1)
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
#ifdef PRUNE
       /* a pruned job is judged by the state its row ended in (a skipped format job's
          cancelled row, say), so pruning hides no dishonest answer */
       if :: job[j] == J_GONE && mark_job != j -> job[j] = pruned[j] :: else fi;
#endif
       /* honest answers: WRITTEN only for the committed job; CONFLICT only when another
          job decided B; SKIPPED only when the batch is in */
       assert(answer[j] != A_WRITTEN || (job[j] == J_COMMITTED && mark_job == j));
       assert(answer[j] != A_CONFLICT || (mark_job != j && job[j] != J_COMMITTED));
       /* (a job that wrote nothing may still get an operator's fence row, ABORTED) */
#ifndef CHECK_AFTER_BEGIN
       assert(answer[j] != A_SKIPPED || job[j] == J_NONE || (fenced[j] && job[j] == J_ABORTED));
#else
       assert(answer[j] != A_SKIPPED || (onep[j] && job[j] == J_NONE)
              || (onep[j] && fenced[j] && job[j] == J_ABORTED)
              || (!onep[j] && (job[j] == J_ABORTED || job[j] == J_RUNNING)));
#endif
       /* FAILED ("target unchanged"): this job committed nothing */
       assert(answer[j] != A_FAILED || job[j] != J_COMMITTED);
       assert(job[j] != J_COMMITTED || mark_job == j);
       /* a one-phase job leaves nothing but its committed row (or its fence's ABORTED row) */
       assert(!onep[j] || job[j] == J_NONE || job[j] == J_COMMITTED || job[j] == J_GONE
              || (job[j] == J_ABORTED && fenced[j]));
#ifdef OPERATOR
       /* the operator's verdict is the job's end: aborted stays aborted (the write may run
          again), committed is committed */
       assert(verdict[j] != V_ABORTED || job[j] == J_ABORTED);
       assert(verdict[j] != V_COMMITTED || job[j] == J_COMMITTED);
#endif
       j++
  :: else -> break
  od
}
