-- Rolls back engine.sql. The schema itself stays: it holds the engine set's
-- version table (and may hold the user's own tables).
DROP TABLE taskport.waiter, taskport.early_signal, taskport.engine_switch,
    taskport_lease.step_result, taskport_lease.task_signal;
DROP TABLE taskport.run;
DROP FUNCTION taskport_lease.forget_deleted_runs(), taskport.run_engines(), taskport.run_statuses();
