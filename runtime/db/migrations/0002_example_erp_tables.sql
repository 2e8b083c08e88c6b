-- Tables written by the example ERP handlers (runtime/handlers). In a real ERP these belong to
-- the application; they live here so the examples and the tests that rely on them are real.

-- ledger.post writes one row per entry. Deliberately no unique constraint: exactly-once effects
-- must come from the platform (effects commit with the fenced completion), not from the table.
CREATE TABLE ledger_entries (
  id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  job_id   uuid NOT NULL,
  batch    text NOT NULL,
  line_no  integer NOT NULL,
  posted_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ledger_entries_batch ON ledger_entries (batch);
CREATE INDEX ledger_entries_job ON ledger_entries (job_id);

-- inventory.cost writes one weighted-average cost row per SKU for a store and period.
CREATE TABLE inventory_costs (
  job_id     uuid NOT NULL,
  store      text NOT NULL,
  period     text NOT NULL,
  sku        text NOT NULL,
  quantity   numeric NOT NULL,
  unit_cost  numeric(18, 6) NOT NULL,
  total_cost numeric(18, 2) NOT NULL,
  PRIMARY KEY (job_id, sku)
);
CREATE INDEX inventory_costs_store_period ON inventory_costs (store, period);
