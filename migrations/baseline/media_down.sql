-- Rolls back media.sql; pg_trgm stays, as another schema may use it.
DROP TABLE approval, asset_operation, decision, download_task, outbox_event, plan;
DROP FUNCTION outbox_event_notify();
