// Unit tests of the pure modules (format, messages, events, live's frame unpacking); no browser.
export default {
  test: { include: ['test/**/*.test.ts'], environment: 'node' }
};
