// tracelake view: a facet <select> submits its form at once; "expand all" opens every folded block;
// a link to a turn (#mN) opens the folded blocks around that message, and a search's words (?q=) are
// marked in it. Text is only wrapped in <mark> elements through DOM calls (never innerHTML).
document.addEventListener("DOMContentLoaded", () => {
  for (const select of document.querySelectorAll("select.autosubmit")) {
    select.addEventListener("change", () => select.form.submit());
  }
  for (const button of document.querySelectorAll("button.expand-all")) {
    button.addEventListener("click", () => {
      const blocks = document.querySelectorAll(".messages details");
      const open = button.textContent === "expand all";
      blocks.forEach((d) => { d.open = open; });
      button.textContent = open ? "collapse all" : "expand all";
    });
  }
  const words = (new URLSearchParams(location.search).get("q") || "").toLowerCase().match(/[\p{L}\p{N}_]+/gu) || [];
  const showTurn = () => {
    const id = decodeURIComponent(location.hash.slice(1));
    const target = /^m\d+$/.test(id) ? document.getElementById(id) : null;
    if (!target) return;
    document.querySelectorAll(".turn-target").forEach((el) => el.classList.remove("turn-target"));
    target.classList.add("turn-target");
    for (let el = target.parentElement; el; el = el.parentElement) {
      if (el.tagName === "DETAILS") el.open = true;
    }
    if (words.length && mark(target, words)) {
      target.querySelectorAll("details").forEach((d) => { if (d.querySelector("mark.hit")) d.open = true; });
      const first = target.querySelector("mark.hit");
      (first || target).scrollIntoView({ block: "center" });
    } else {
      target.querySelectorAll(":scope > details, :scope > .toolpair details").forEach((d) => { d.open = true; });
      target.scrollIntoView({ block: "start" });
    }
  };
  showTurn();
  window.addEventListener("hashchange", showTurn);
});

// Wrap each whole-word, case-insensitive occurrence of `words` in the text under `root`; how many.
function mark(root, words) {
  const pattern = new RegExp("(?<![\\p{L}\\p{N}_])(" + words.map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|") +
                             ")(?![\\p{L}\\p{N}_])", "giu");
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const nodes = [];
  while (walker.nextNode()) nodes.push(walker.currentNode);
  let found = 0;
  for (const node of nodes) {
    if (node.parentElement.closest("mark.hit")) continue;
    const text = node.nodeValue;
    pattern.lastIndex = 0;
    if (!pattern.test(text)) continue;
    pattern.lastIndex = 0;
    const frag = document.createDocumentFragment();
    let last = 0;
    for (const m of text.matchAll(pattern)) {
      frag.append(document.createTextNode(text.slice(last, m.index)));
      const el = document.createElement("mark");
      el.className = "hit";
      el.textContent = m[0];
      frag.append(el);
      last = m.index + m[0].length;
      found += 1;
    }
    frag.append(document.createTextNode(text.slice(last)));
    node.replaceWith(frag);
  }
  return found;
}
