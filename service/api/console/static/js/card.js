// The confirmation card: sign what is shown, post it, execute, follow the execution.
//
// The statement is built here from the params this page displays, never taken from the
// server: the digest is recomputed with JCS + SHA-256, and a page whose params do not hash
// to the digest the server names is refused before anything is signed (a draft the page
// cannot show faithfully must not be approved from it). Everything written into the page is
// textContent: nothing the server or the agent sent is ever parsed as HTML.

import { canonicalBytes, sha256Hex } from "./jcs.js";
import { postJson, requestJson, signWith, storedKey } from "./keys.js";
import { passkeyAssertion } from "./passkeys.js";

const FINISHED = new Set(["succeeded", "failed"]);
const STATEMENT_TYPE = "draftgate.approval.v1";

const element = (id) => document.getElementById(id);

function write(id, text) {
  const target = element(id);
  if (target) {
    target.textContent = text;
  }
}

function readDraft() {
  const data = element("draft-data");
  return data ? JSON.parse(data.textContent) : null;
}

function setDecisionButtons(enabled) {
  for (const id of ["approve", "approve-passkey", "reject", "reject-passkey"]) {
    const button = element(id);
    if (button) {
      button.disabled = !enabled || button.hidden; // hidden: the server says you cannot
    }
  }
}

/** RFC 3339 UTC with Z, whole seconds (as the CLI writes it). */
function nowRfc3339() {
  return new Date().toISOString().replace(/\.\d{3}Z$/, "Z");
}

/** The statement of DESIGN.md §4 over the displayed draft (reason only on rejections). */
export function statementFor(draft, { paramsSha256, decision, keyId, reason }) {
  const statement = {
    type: STATEMENT_TYPE,
    tenant: draft.tenant,
    draft_id: draft.draft_id,
    revision: draft.revision,
    action: draft.action,
    contract_version: draft.contract_version,
    params_sha256: paramsSha256,
    decision,
    approver: draft.approver,
    key_id: keyId,
    issued_at: nowRfc3339(),
  };
  // The source revision the page showed (docs/approvals.md): present exactly when the
  // draft has a source, so the approval is for the world the approver saw.
  if (draft.source_revision) {
    statement.source_revision = draft.source_revision;
  }
  if (decision === "reject") {
    statement.reason = reason;
  }
  return statement;
}

async function decide(draft, paramsSha256, choice) {
  // One decision at a time: a second click while signing would only be refused as
  // ALREADY_SIGNED. The buttons come back if this one fails.
  setDecisionButtons(false);
  try {
    await signAndPost(draft, paramsSha256, choice);
  } catch (error) {
    setDecisionButtons(true);
    throw error;
  }
}

async function signAndPost(draft, paramsSha256, { decision, passkey }) {
  let reason;
  if (decision === "reject") {
    reason = (element("reject-reason")?.value || "").trim();
    if (!reason) {
      setDecisionButtons(true);
      write("decision-status", "a rejection needs a reason: the agent is told it");
      return;
    }
  }
  let body;
  if (passkey) {
    body = await passkeyAssertion((keyId) =>
      statementFor(draft, { paramsSha256, decision, keyId, reason }),
    );
  } else {
    const key = await storedKey(draft.tenant, draft.approver);
    if (!key) {
      setDecisionButtons(true);
      write("decision-status", "no signing key in this browser: import or generate one first");
      return;
    }
    const statement = statementFor(draft, { paramsSha256, decision, keyId: key.key_id, reason });
    body = { statement, signature: await signWith(key, canonicalBytes(statement)) };
  }
  write("decision-status", `sending your signed ${decision} statement…`);
  const url = `/console/drafts/${encodeURIComponent(draft.draft_id)}/approvals`;
  const answer = await postJson(url, body);
  const updated = answer.draft;
  const verb = decision === "approve" ? "approved" : "rejected";
  // The server's count (the execute gate's), never one of our own.
  const progress = updated.progress;
  write("decision-status", `${verb} revision ${draft.revision}; ${standing(updated, progress)}`);
  if (updated.status === "approved") {
    showExecute();
  }
}

function showExecute() {
  const button = element("execute");
  if (button) {
    button.hidden = false;
    button.disabled = false;
  }
}

async function execute(draft) {
  const button = element("execute");
  button.disabled = true;
  let answer;
  try {
    answer = await postJson(`/console/drafts/${encodeURIComponent(draft.draft_id)}/execute`, {});
  } catch (error) {
    button.disabled = false;
    throw error;
  }
  write("execution-status", `execution ${answer.execution_id}: ${answer.status}`);
  follow(answer.execution_id);
}

/** Follow an execution until it finished: server-sent events, one look by GET to end with. */
function follow(executionId) {
  const base = `/console/executions/${encodeURIComponent(executionId)}`;
  const show = (status) => write("execution-status", `execution ${executionId}: ${status}`);
  const events = new EventSource(`${base}/events`);
  events.addEventListener("execution", (event) => {
    const { status } = JSON.parse(event.data);
    show(status);
    if (FINISHED.has(status)) {
      events.close();
    }
  });
  events.onerror = async () => {
    // The stream ended or broke: the execution's state says whether anything is missed.
    events.close();
    try {
      const { status } = await requestJson(base);
      show(status);
      if (!FINISHED.has(status)) {
        setTimeout(() => follow(executionId), 1000);
      }
    } catch (error) {
      write("execution-status", error.message);
    }
  };
}

function guarded(action, target = "decision-status") {
  return async (event) => {
    event.preventDefault();
    try {
      await action();
    } catch (error) {
      write(target, error instanceof Error ? error.message : String(error));
    }
  };
}

async function wireCard() {
  const draft = readDraft();
  if (!draft) {
    return;
  }
  setDecisionButtons(false);
  const paramsSha256 = await sha256Hex(canonicalBytes(draft.params));
  if (paramsSha256 !== draft.params_sha256) {
    write(
      "decision-status",
      `refused: the params shown hash to ${paramsSha256}, the server says ` +
        `${draft.params_sha256}; nothing can be signed from this page`,
    );
    return;
  }
  // The server hides what this person cannot do now (an approved draft can still be
  // rejected, not approved again): every button it shows may be used.
  setDecisionButtons(true);
  element("approve")?.addEventListener(
    "click",
    guarded(() => decide(draft, paramsSha256, { decision: "approve", passkey: false })),
  );
  element("approve-passkey")?.addEventListener(
    "click",
    guarded(() => decide(draft, paramsSha256, { decision: "approve", passkey: true })),
  );
  element("reject")?.addEventListener(
    "click",
    guarded(() => decide(draft, paramsSha256, { decision: "reject", passkey: false })),
  );
  element("reject-passkey")?.addEventListener(
    "click",
    guarded(() => decide(draft, paramsSha256, { decision: "reject", passkey: true })),
  );
  element("execute")?.addEventListener(
    "click",
    guarded(() => execute(draft), "execution-status"),
  );
  if (draft.execution_id) {
    follow(draft.execution_id);
  } else if (draft.status === "approved") {
    showExecute();
  }
  document.body.dataset.cardReady = "true"; // for tests and for styles: the JS is wired
}

wireCard().catch((error) => write("decision-status", String(error)));

// Where the draft stands after a decision, in words, from the server's count (the gate's).
function standing(updated, progress) {
  const count = `${progress.received} of ${progress.required} approvals`;
  switch (updated.status) {
    case "proposed": {
      const missing = progress.required - progress.received;
      return `${count}: it waits for ${missing} more`;
    }
    case "approved":
      return `approved (${count}): it can be executed`;
    case "rejected":
      return "the draft is rejected: it will not run";
    default:
      return `the draft is ${updated.status} (${count})`;
  }
}
