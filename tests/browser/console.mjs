// The operator console as a person sees it, in Debian's Chromium (tests/it/console.rs runs
// this against a registry it seeded). Signs in through the form, walks every page at desktop
// and phone widths with JavaScript off, reads the DOM for what each page must show, takes a
// screenshot of each, and runs axe-core in each page. Prints one JSON report; exits 1 if any
// check failed.
//
// Input (environment): CONSOLE_BASE (http://127.0.0.1:port), CONSOLE_KEY (a reader key),
// CONSOLE_SEED (JSON: ids of the seeded callees, the demoting run, a snapshot with a
// predecessor), CONSOLE_SHOTS (a directory for the PNGs), CHROMIUM (the browser).

import { readFileSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { chromium } from "playwright-core";

const require = createRequire(import.meta.url);
const AXE = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");

const base = process.env.CONSOLE_BASE;
const key = process.env.CONSOLE_KEY;
const seed = JSON.parse(process.env.CONSOLE_SEED);
const shots = process.env.CONSOLE_SHOTS;
mkdirSync(shots, { recursive: true });

const report = { checks: [], failures: [], axe: {}, screenshots: [] };
function check(name, ok, detail = "") {
  report.checks.push({ name, ok });
  if (!ok) report.failures.push(`${name}${detail ? `: ${detail}` : ""}`);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM,
  args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
});

// Light at desktop and phone widths, and dark (the system's preference) at desktop width.
const viewports = {
  desktop: { viewport: { width: 1280, height: 900 }, colorScheme: "light" },
  phone: { viewport: { width: 360, height: 740 }, colorScheme: "light" },
  dark: { viewport: { width: 1280, height: 900 }, colorScheme: "dark" },
};

const pages = {
  callees: "/ui",
  callee: `/ui/callees/${seed.demoted}`,
  subject: `/ui/callees/${seed.demoted}/subjects/1.0`,
  probe: `/ui/probes/${seed.demoting_run}`,
  card: `/ui/callees/${seed.untrusted}/cards/${seed.untrusted_snapshot}`,
  rulebook: "/ui/rulebook",
};

try {
  for (const [width, look] of Object.entries(viewports)) {
    // JavaScript off: the console must work without it.
    const context = await browser.newContext({ ...look, javaScriptEnabled: false });
    const page = await context.newPage();

    // Opening the root sends a person to the sign-in form, and back to the console after.
    await page.goto(`${base}/`);
    check(`${width}: / leads to the sign-in form`, page.url().startsWith(`${base}/ui/sign-in`), page.url());
    await page.fill("input[name=key]", "not-a-key");
    await Promise.all([page.waitForLoadState(), page.click("button[type=submit]")]);
    check(`${width}: a wrong key is refused on the form`, (await page.textContent("[role=alert]"))?.includes("not valid"));
    await page.fill("input[name=key]", key);
    await Promise.all([page.waitForURL(`${base}/ui`), page.click("button[type=submit]")]);
    const cookies = await context.cookies();
    const session = cookies.find((c) => c.name === "cardgate_session");
    check(`${width}: the session cookie is HttpOnly and SameSite=Strict`, session?.httpOnly && session?.sameSite === "Strict", JSON.stringify(session));
    check(`${width}: the cookie is not the key`, session && !session.value.includes(key));

    // Callees: every seeded callee with its gate badge; the filter narrows to the demoted one.
    const states = await page.$$eval("tr[data-callee] .subjects .badge", (els) => els.map((e) => e.textContent.trim()));
    for (const state of ["1.0 lifecycle-trusted", "1.0 demoted", "1.0 untrusted"]) {
      check(`${width}: callees list shows ${state}`, states.includes(state), states.join(" | "));
    }
    await shoot(page, `${width}-callees`);
    await page.selectOption("select[name=state]", "demoted");
    await Promise.all([page.waitForLoadState(), page.click("form.filter button")]);
    const rows = await page.$$eval("tr[data-callee]", (els) => els.map((e) => e.dataset.callee));
    check(`${width}: filtering by demoted leaves the demoted callee only`, rows.length === 1 && rows[0] === seed.demoted, rows.join(","));

    // The rest of the pages, each read for what it must show.
    await page.goto(`${base}${pages.callee}`);
    check(`${width}: the callee lists its probe runs`, (await page.$$(`a[href="/ui/probes/${seed.demoting_run}"]`)).length > 0);
    await shoot(page, `${width}-callee`);

    await page.goto(`${base}${pages.subject}`);
    const demotion = await page.textContent("li[data-kind=demoted] [data-trigger]");
    check(`${width}: the timeline names the demotion's trigger`, demotion?.includes("timestamp"), demotion);
    check(`${width}: the demotion links to its probe run`, (await page.$$(`li[data-kind=demoted] a[href="/ui/probes/${seed.demoting_run}"]`)).length === 1);
    // The timestamp demotion binds callers who deduplicate by timestamp, not the others.
    const told = await page.$$eval("section.decision", (els) => Object.fromEntries(els.map((e) => [e.getAttribute("aria-label"), e.querySelector("h3 .badge").textContent.trim()])));
    check(`${width}: a caller deduplicating by timestamp is told advisory`, told["Deduplicating terminal events by timestamp"] === "advisory", JSON.stringify(told));
    check(`${width}: a caller not deduplicating is told authoritative`, told["Not deduplicating"] === "authoritative", JSON.stringify(told));
    const badge = await page.$eval("img[src*='/badge/']", (img) => ({ w: img.naturalWidth, src: img.getAttribute("src") }));
    check(`${width}: the badge image loads`, badge.w > 50, JSON.stringify(badge));
    const markdown = await page.inputValue("#badge-markdown");
    check(`${width}: the badge's Markdown is ready to copy`, markdown.includes(`${base}/badge/${seed.demoted}/1.0.svg`), markdown);
    const strip = await page.$$eval("ol.strip a.run", (els) => els.map((e) => e.getAttribute("aria-label")));
    check(`${width}: the track record's strip names each run`, strip.length >= 1 && strip.every((l) => /passed|failed|aborted/.test(l ?? "")), strip.join(" | "));
    await shoot(page, `${width}-subject`);

    await page.goto(`${base}${pages.probe}`);
    const lanes = await page.$$eval("svg.seq g.lane", (els) => els.map((e) => e.dataset.channel));
    const arrowLanes = new Set(await page.$$eval("svg.seq g.arrow", (els) => els.map((e) => e.dataset.channel)));
    check(`${width}: one lane per channel`, lanes.length >= 2 && lanes.length === arrowLanes.size && lanes.every((l) => arrowLanes.has(l)), `${lanes} vs ${[...arrowLanes]}`);
    const marked = await page.$$eval("svg.seq g.arrow.violation", (els) => els.map((e) => e.dataset.state));
    check(`${width}: the missing terminal timestamp is marked where it occurs`, marked.length >= 1 && marked.every((s) => s === "completed"), marked.join(","));
    check(`${width}: the failed rule is listed`, (await page.$$("tr[data-rule=LC-TERMINAL-NO-TIMESTAMP] .st-fail")).length === 1);
    check(`${width}: exchanges are collapsed`, (await page.$$("details.exchange[open]")).length === 0 && (await page.$$("details.exchange")).length > 0);
    await shoot(page, `${width}-probe`);

    await page.goto(`${base}${pages.card}`);
    const signature = await page.textContent("[data-signature]");
    check(`${width}: the card page gives the signature verdict`, signature?.length > 3, signature);
    check(`${width}: the card page compares with the previous snapshot`, (await page.textContent("main"))?.includes("Compared with"));
    await shoot(page, `${width}-card`);

    await page.goto(`${base}${pages.rulebook}`);
    const timestamps = await page.textContent("tr#LC-TIMESTAMPS");
    check(`${width}: the rulebook says a MUST blocks by the trust model`, timestamps?.includes("yes, by the trust model"), timestamps);
    check(`${width}: the rulebook gives each rule's source`, timestamps?.includes("A2A v1.0"), timestamps);
    await shoot(page, `${width}-rulebook`);

    // Sign-out ends the session: the console asks for a key again.
    await page.goto(`${base}/ui`);
    await Promise.all([page.waitForURL(/\/ui\/sign-in/), page.click("form[action='/ui/sign-out'] button")]);
    await page.goto(`${base}/ui`);
    check(`${width}: after signing out the console asks for a key`, page.url().startsWith(`${base}/ui/sign-in`), page.url());
    await context.close();

    // Accessibility: axe-core in each page (the CSP keeps scripts out; only this check's
    // context bypasses it, and only to inject axe).
    const axeContext = await browser.newContext({ ...look, bypassCSP: true });
    const axePage = await axeContext.newPage();
    await axePage.goto(`${base}/ui/sign-in`);
    report.axe[`${width} sign-in`] = await axe(axePage);
    await axePage.fill("input[name=key]", key);
    await Promise.all([axePage.waitForURL(`${base}/ui`), axePage.click("button[type=submit]")]);
    for (const [name, path] of Object.entries(pages)) {
      await axePage.goto(`${base}${path}`);
      report.axe[`${width} ${name}`] = await axe(axePage);
      // Nothing overflows the page sideways: wide tables and the diagram scroll in place.
      const overflow = await axePage.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      check(`${width}: ${name} fits the width`, overflow <= 1, `${overflow}px too wide`);
    }
    await axeContext.close();
  }
} finally {
  await browser.close();
}

for (const [page, violations] of Object.entries(report.axe)) {
  const serious = violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  check(`axe: no serious violation on ${page}`, serious.length === 0, JSON.stringify(serious));
}

console.log(JSON.stringify(report, null, 2));
process.exit(report.failures.length ? 1 : 0);

async function shoot(page, name) {
  const path = `${shots}/${name}.png`;
  await page.screenshot({ path, fullPage: true });
  report.screenshots.push(path);
}

async function axe(page) {
  await page.addScriptTag({ content: AXE });
  const result = await page.evaluate(async () =>
    // eslint-disable-next-line no-undef
    (await axe.run(document, { resultTypes: ["violations"] })).violations.map((v) => ({
      id: v.id,
      impact: v.impact,
      nodes: v.nodes.length,
      help: v.help,
    })),
  );
  return result;
}
