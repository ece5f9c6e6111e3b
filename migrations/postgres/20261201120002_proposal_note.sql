-- Mirror of ../20261201120002_proposal_note.sql.
ALTER TABLE proposals ADD COLUMN note TEXT CHECK (note IS NULL OR note <> '');
