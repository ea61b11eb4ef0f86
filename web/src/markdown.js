// Markdown for replies: marked renders, DOMPurify sanitises (no scripts, no event handlers, no
// styles, no forms or frames), highlight.js colours code blocks. The page's
// Content-Security-Policy is the second wall: inline script would not run even if it got here.
import { Marked } from 'marked';
import DOMPurify from 'dompurify';
import hljs from 'highlight.js/lib/core';
import bash from 'highlight.js/lib/languages/bash';
import cpp from 'highlight.js/lib/languages/cpp';
import javascript from 'highlight.js/lib/languages/javascript';
import json from 'highlight.js/lib/languages/json';
import python from 'highlight.js/lib/languages/python';
import xml from 'highlight.js/lib/languages/xml';

hljs.registerLanguage('bash', bash);
hljs.registerLanguage('cpp', cpp);
hljs.registerLanguage('javascript', javascript);
hljs.registerLanguage('json', json);
hljs.registerLanguage('python', python);
hljs.registerLanguage('xml', xml);

const marked = new Marked({ gfm: true, breaks: true });
marked.use({
  renderer: {
    code({ text, lang }) {
      const l = (lang || '').split(/\s/)[0];
      const out = l && hljs.getLanguage(l) ? hljs.highlight(text, { language: l }) : hljs.highlightAuto(text);
      return '<pre><code class="hljs">' + out.value + '</code></pre>';
    },
  },
});

const purifyConfig = {
  FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'iframe', 'object', 'embed', 'svg', 'math'],
  FORBID_ATTR: ['style', 'srcset'],
  ALLOW_DATA_ATTR: false,
};

// Links open in a new tab without handing this page to the target.
DOMPurify.addHook('afterSanitizeAttributes', (node) => {
  if (node.tagName === 'A' && node.getAttribute('href')) {
    node.setAttribute('target', '_blank');
    node.setAttribute('rel', 'noopener noreferrer');
  }
});

// Sanitised HTML of `text` as markdown.
export function renderMarkdown(text) {
  return DOMPurify.sanitize(marked.parse(text || ''), purifyConfig);
}
