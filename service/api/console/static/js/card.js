// The confirmation card: sign what is shown, post it, execute, follow the execution.
//
// The statement is built here from the params this page displays, never taken from the
// server: the digest is recomputed with JCS + SHA-256, and a page whose params do not hash
// to the digest the server names is refused before anything is signed (a draft the page
// cannot show faithfully must not be approved from it). Everything written into the page is
// textContent, with one exception that is no weaker than a reload: the live refresh takes
// the regions marked data-live from this same page as the server renders it now (parsed
// inert by DOMParser: no script runs), so the card keeps up without a reload.

import { canonicalBytes, sha256Hex } from "./jcs.js";
import { minorUnits } from "./money.js";
import { postJson, requestJson, showProblem, signWith, storedKey } from "./keys.js";
import { passkeyAssertion } from "./passkeys.js";

const FINISHED = new Set(["succeeded", "failed", "expired"]);
const BUTTONS = ["approve", "approve-passkey", "reject", "reject-passkey", "execute"];
const REFRESH_HEADER = "X-Console-Refresh"; // a refresh is not the person's activity
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
  await refresh(draft);
}

/** Lower the amount and approve the narrowed revision (docs/approvals.md, "Narrowing"):
 * the params, their digest and the next revision are computed here, from the params shown. */
async function narrow(draft) {
  const amount = draft.params.amount;
  let lower;
  try {
    lower = minorUnits(element("narrow-amount").value, amount.currency, "the lower amount");
  } catch (error) {
    write("decision-status", error.message);
    return;
  }
  if (lower === null) {
    write("decision-status", "type the lower amount first");
    return;
  }
  const key = await storedKey(draft.tenant, draft.approver);
  if (!key) {
    write("decision-status", "no signing key in this browser: import or generate one first");
    return;
  }
  const params = { ...draft.params, amount: { ...amount, amount_minor: lower } };
  const paramsSha256 = await sha256Hex(canonicalBytes(params));
  const next = { ...draft, revision: draft.revision + 1 };
  const statement = statementFor(next, { paramsSha256, decision: "approve", keyId: key.key_id });
  const body = { params, statement, signature: await signWith(key, canonicalBytes(statement)) };
  write("decision-status", "sending the narrowed params and your signed approval…");
  const url = `/console/drafts/${encodeURIComponent(draft.draft_id)}/narrow`;
  const answer = await postJson(url, body);
  write("decision-status", `narrowed to revision ${answer.draft.revision}: ${answer.draft.summary}`);
  window.location.reload(); // a new revision: what is shown must be what is signed next
}

/** Oversight (docs/metrics.md): the revision is on screen, and which of its sections the
 * approver has had in view (the params, the record it changes). A measure, never a gate: a
 * report that fails changes nothing else. */
function reportViews(draft) {
  if (draft.status !== "proposed" || !document.getElementById("decide")) {
    return;
  }
  const url = `/console/drafts/${encodeURIComponent(draft.draft_id)}/views`;
  const report = (seen) => postJson(url, { revision: draft.revision, seen }).catch(() => {});
  report([]);
  const sections = { params: element("params"), source: element("world") };
  const observer = new IntersectionObserver((entries) => {
    for (const entry of entries) {
      if (entry.isIntersecting) {
        const seen = Object.keys(sections).find((name) => sections[name] === entry.target);
        observer.unobserve(entry.target);
        report([seen]);
      }
    }
  }, { threshold: 0.5 });
  for (const section of Object.values(sections)) {
    if (section) {
      observer.observe(section);
    }
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
  draft.execution_id = answer.execution_id;
  follow(draft, answer.execution_id);
  await refresh(draft);
}

/**
 * Re-read this page and put its live regions (facts, the world, decisions, the execution)
 * and the server's choice of buttons in place. A new revision (the agent revised it, or its
 * source moved and it was rebased) reloads the page: what is signed must be what is shown.
 */
async function refresh(draft) {
  const response = await fetch(window.location.href, {
    headers: { Accept: "text/html", [REFRESH_HEADER]: "1" },
    credentials: "same-origin",
  });
  if (!response.ok) {
    return;
  }
  const next = new DOMParser().parseFromString(await response.text(), "text/html");
  const data = next.getElementById("draft-data");
  const fresh = data ? JSON.parse(data.textContent) : null;
  if (!fresh) {
    return;
  }
  const nowInconsistent = Boolean(next.getElementById("inconsistent"));
  if (
    fresh.revision !== draft.revision ||
    fresh.source_revision !== draft.source_revision ||
    nowInconsistent !== Boolean(element("inconsistent"))
  ) {
    window.location.reload(); // what is signed must be what is shown: show it anew
    return;
  }
  for (const region of document.querySelectorAll("[data-live]")) {
    const replacement = next.getElementById(region.id);
    if (replacement) {
      region.replaceWith(document.importNode(replacement, true));
    }
  }
  for (const id of BUTTONS) {
    const button = element(id);
    const now = next.getElementById(id);
    if (button) {
      // A button the server no longer renders is one this person may no longer use.
      button.hidden = !now || now.hidden;
      button.disabled = button.hidden || now.disabled;
    }
  }
  draft.status = fresh.status;
  if (fresh.execution_id && fresh.execution_id !== draft.execution_id) {
    draft.execution_id = fresh.execution_id;
    follow(draft, fresh.execution_id);
  }
  document.body.dataset.cardRefreshed = String(Number(document.body.dataset.cardRefreshed || 0) + 1);
}

/** Refresh when this draft, or another pending on the same source, changes: the inbox's
 * live channel (one EventSource on /console/events). */
function listen(draft) {
  const events = new EventSource("/console/events");
  let pending = null;
  events.addEventListener("draft", (message) => {
    const { draft_id: changed } = JSON.parse(message.data);
    const related = new Set([draft.draft_id, ...relatedDrafts()]);
    if (!related.has(changed) || pending) {
      return;
    }
    pending = setTimeout(() => {
      pending = null;
      refresh(draft).catch((error) => showProblem(element("decision-status"), error));
    }, 150);
  });
}

function relatedDrafts() {
  return [...document.querySelectorAll("#source-others [data-draft-id]")].map(
    (item) => item.dataset.draftId,
  );
}

/** Follow an execution until it finished: server-sent events, one look by GET to end with;
 * each change refreshes the card (a failure shows its reason at once). */
function follow(draft, executionId) {
  const base = `/console/executions/${encodeURIComponent(executionId)}`;
  const show = (status) => {
    if (draft.execution_id === executionId) {
      refresh(draft).catch(() => write("execution-status", `execution ${executionId}: ${status}`));
    }
  };
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
        setTimeout(() => follow(draft, executionId), 1000);
      }
    } catch (error) {
      showProblem(element("execution-status"), error);
    }
  };
}

function guarded(action, target = "decision-status") {
  return async (event) => {
    event.preventDefault();
    try {
      await action();
    } catch (error) {
      showProblem(element(target), error);
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
  element("narrow-button")?.addEventListener("click", guarded(() => narrow(draft)));
  reportViews(draft);
  if (draft.execution_id && !FINISHED.has(draft.execution_status)) {
    follow(draft, draft.execution_id);
  } else if (draft.status === "approved") {
    showExecute();
  }
  listen(draft);
  document.body.dataset.cardReady = "true"; // for tests and for styles: the JS is wired
}

wireCard().catch((error) => showProblem(element("decision-status"), error));

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
